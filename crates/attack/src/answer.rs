//! What the node answered to an unvalidated connection attempt: the QUIC long-header packets
//! coalesced in one answer datagram (RFC 9000 17.2, 12.2), read with quinn-proto's own header
//! decoder, so that a Retry, a refusal and a handshake taken further are told apart. Pure: it
//! reads peer input, so any bytes give an answer and never a panic.

use std::io::Cursor;

use bytes::BytesMut;
use quinn_proto::{
    DEFAULT_SUPPORTED_VERSIONS, FixedLengthConnectionIdParser, LongType, ProtectedHeader,
};

/// What one answer datagram of the node says about an attempt it has not validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A Retry: the node turned the attempt away until its address is validated.
    Retry,
    /// Only Initial packets (a CONNECTION_CLOSE in an Initial): the node refused the attempt
    /// without taking it further, which it does only while pacing a source that failed to
    /// authenticate (`r[forward.auth.pacing+3]`; quinn drops, never answers, an Initial past its
    /// bounds on attempts).
    Refused,
    /// A Handshake packet: the node took an attempt whose address it never validated into its
    /// handshake.
    Handshake,
    /// Version negotiation: the node does not speak the attempt's version and kept nothing of
    /// it, going no further. Not an overreach; nor did the attempt reach the node's address
    /// validation, so it counts only as answered (a flood answered so measured nothing).
    VersionNegotiation,
    /// Nothing the suite can read as a Retry or a refusal (no long header, a packet cut short,
    /// another version); it cannot show the node did not go further.
    Unreadable,
}

// i[impl attack.budgets+3]
/// Walks the long-header packets coalesced in `datagram` and says what the node answered: any
/// Handshake packet → [`Answer::Handshake`]; a Retry first → [`Answer::Retry`]; version
/// negotiation first → [`Answer::VersionNegotiation`]; only Initial packets →
/// [`Answer::Refused`]. Bytes after the last whole long-header packet that are no long header
/// (padding, a short header) are ignored, as a receiver ignores them.
pub fn classify(datagram: &[u8]) -> Answer {
    // The node's own connection ids are not known here; only a short header needs their length,
    // and a short header ends the walk anyway.
    let short_cids = FixedLengthConnectionIdParser::new(0);
    let mut rest = BytesMut::from(datagram);
    let mut initials = 0usize;
    while !rest.is_empty() {
        let mut cursor = Cursor::new(rest);
        let header = ProtectedHeader::decode(
            &mut cursor,
            &short_cids,
            DEFAULT_SUPPORTED_VERSIONS,
            // A peer may grease the fixed bit (RFC 9287); the type bits are what matter here.
            true,
        );
        let len = match header {
            Ok(ProtectedHeader::Long {
                ty: LongType::Handshake,
                ..
            }) => return Answer::Handshake,
            // A Retry has no length: it is the rest of the datagram, and never follows a packet.
            Ok(ProtectedHeader::Retry { .. }) if initials == 0 => return Answer::Retry,
            Ok(ProtectedHeader::Initial(initial)) => initial.len,
            // Version negotiation is a whole datagram of its own, never coalesced.
            Ok(ProtectedHeader::VersionNegotiate { .. }) if initials == 0 => {
                return Answer::VersionNegotiation;
            }
            // A short header, 0-RTT from a server, or bytes that are no header: the end of the
            // packets, or nothing readable at all.
            _ => break,
        };
        let start = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
        rest = cursor.into_inner();
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len));
        match end {
            Some(end) if end <= rest.len() => {
                initials += 1;
                rest = rest.split_off(end);
            }
            // An Initial that claims more than the datagram holds is cut short: unreadable.
            _ => return Answer::Unreadable,
        }
    }
    if initials > 0 {
        Answer::Refused
    } else {
        Answer::Unreadable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    const V1: [u8; 4] = [0, 0, 0, 1];

    /// A QUIC varint in its shortest form (the lengths here stay under 2^30).
    fn varint(v: usize) -> Vec<u8> {
        match v {
            0..=63 => vec![v as u8],
            64..=16_383 => (0x4000 | v as u16).to_be_bytes().to_vec(),
            _ => (0x8000_0000 | v as u32).to_be_bytes().to_vec(),
        }
    }

    fn ids(dcid: &[u8], scid: &[u8]) -> Vec<u8> {
        let mut out = vec![dcid.len() as u8];
        out.extend_from_slice(dcid);
        out.push(scid.len() as u8);
        out.extend_from_slice(scid);
        out
    }

    /// An Initial (type 0) with `token` and `payload` (its packet number and protected frames,
    /// opaque here).
    fn initial(dcid: &[u8], scid: &[u8], token: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc3];
        p.extend_from_slice(&V1);
        p.extend(ids(dcid, scid));
        p.extend(varint(token.len()));
        p.extend_from_slice(token);
        p.extend(varint(payload.len()));
        p.extend_from_slice(payload);
        p
    }

    /// A long header of type 2 (Handshake) or 1 (0-RTT) with `payload`.
    fn long(ty: u8, dcid: &[u8], scid: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc3 | (ty << 4)];
        p.extend_from_slice(&V1);
        p.extend(ids(dcid, scid));
        p.extend(varint(payload.len()));
        p.extend_from_slice(payload);
        p
    }

    /// A Retry (type 3): its token and integrity tag run to the end of the datagram.
    fn retry(dcid: &[u8], scid: &[u8], token: &[u8]) -> Vec<u8> {
        let mut p = vec![0xf0];
        p.extend_from_slice(&V1);
        p.extend(ids(dcid, scid));
        p.extend_from_slice(token);
        p.extend_from_slice(&[0xaa; 16]);
        p
    }

    // i[verify attack.budgets+3]
    #[test]
    fn a_retry_is_the_node_turning_the_attempt_away() {
        assert_eq!(classify(&retry(&[1; 8], &[2; 8], &[9; 40])), Answer::Retry);
        // Whatever its token holds, even bytes that look like another packet.
        let mut looks = retry(&[1; 8], &[2; 8], &[]);
        looks.extend(long(2, &[1; 8], &[2; 8], &[0; 20]));
        assert_eq!(classify(&looks), Answer::Retry);
    }

    // i[verify attack.budgets+3]
    #[test]
    fn only_initial_packets_are_a_refusal_padding_after_them_ignored() {
        let close = initial(&[1; 8], &[2; 8], &[], &[7; 30]);
        assert_eq!(classify(&close), Answer::Refused);
        // Two coalesced, the second with a token; then zero padding, which is no long header.
        let mut two = close.clone();
        two.extend(initial(&[1; 8], &[], &[5; 70], &[7; 200]));
        two.extend_from_slice(&[0; 300]);
        assert_eq!(classify(&two), Answer::Refused);
    }

    // i[verify attack.budgets+3]
    #[test]
    fn any_handshake_packet_is_the_node_going_further() {
        // The server's first flight: an Initial (its ServerHello) and Handshake packets.
        let mut flight = initial(&[1; 8], &[2; 8], &[], &[7; 90]);
        flight.extend(long(2, &[1; 8], &[2; 8], &[8; 1000]));
        assert_eq!(classify(&flight), Answer::Handshake);
        // A Handshake packet alone, and one after two Initials.
        assert_eq!(
            classify(&long(2, &[], &[2; 20], &[8; 64])),
            Answer::Handshake
        );
        let mut later = initial(&[1; 8], &[2; 8], &[], &[7; 30]);
        later.extend(initial(&[1; 8], &[2; 8], &[], &[7; 30]));
        later.extend(long(2, &[1; 8], &[2; 8], &[8; 3]));
        assert_eq!(classify(&later), Answer::Handshake);
    }

    // i[verify attack.budgets+3]
    #[test]
    fn what_cannot_be_read_as_a_retry_or_a_refusal_is_unreadable() {
        assert_eq!(classify(&[]), Answer::Unreadable);
        // A short header, 0-RTT from a server, another version.
        assert_eq!(classify(&[0x40, 1, 2, 3, 4]), Answer::Unreadable);
        assert_eq!(
            classify(&long(1, &[1; 8], &[2; 8], &[0; 10])),
            Answer::Unreadable
        );
        let mut other = initial(&[1; 8], &[2; 8], &[], &[7; 30]);
        other[1..5].copy_from_slice(&[0x0a, 0x0a, 0x0a, 0x0a]);
        assert_eq!(classify(&other), Answer::Unreadable);
        // An Initial whose length runs past the datagram, and a connection id past 20 bytes.
        let mut cut = initial(&[1; 8], &[2; 8], &[], &[7; 30]);
        cut.truncate(cut.len() - 1);
        assert_eq!(classify(&cut), Answer::Unreadable);
        assert_eq!(
            classify(&initial(&[1; 21], &[2; 8], &[], &[7; 30])),
            Answer::Unreadable
        );
        // A Retry after an Initial is no Retry (a Retry is never coalesced).
        let mut late = initial(&[1; 8], &[2; 8], &[], &[7; 30]);
        late.extend(retry(&[1; 8], &[2; 8], &[9; 4]));
        assert_eq!(classify(&late), Answer::Refused);
    }

    /// How the node's own endpoint (quinn-proto, on the node's server configuration) answers
    /// one real client Initial, decided by `decide`: each datagram it sends back.
    // Test harness code: a broken setup should stop the test loudly.
    #[allow(clippy::expect_used)]
    fn node_answers(
        decide: impl FnOnce(
            &mut quinn_proto::Endpoint,
            quinn_proto::Incoming,
            &mut Vec<u8>,
        ) -> Vec<Vec<u8>>,
    ) -> Vec<Vec<u8>> {
        use std::net::SocketAddr;
        use std::sync::Arc;
        use std::time::{Duration, Instant};

        use quinn_proto::{DatagramEvent, Endpoint, EndpointConfig};

        let dir = tempfile::tempdir().expect("tempdir");
        let identity =
            holdfast_forward::Identity::load_or_create(dir.path()).expect("the node's identity");
        let idle = Duration::from_secs(15);
        let server_config =
            holdfast_forward::server::quinn_server_config(&identity, idle).expect("server config");
        let mut node = Endpoint::new(
            Arc::new(EndpointConfig::default()),
            Some(Arc::new(server_config)),
            true,
            Some([7; 32]),
        );
        let (client_config, _) =
            holdfast_forward::client::quinn_client_config(identity.fingerprint(), idle)
                .expect("client config");
        let mut client = Endpoint::new(
            Arc::new(EndpointConfig::default()),
            None,
            true,
            Some([9; 32]),
        );
        let at: SocketAddr = "127.0.0.1:4433".parse().expect("addr");
        let from: SocketAddr = "127.0.0.2:50000".parse().expect("addr");
        let now = Instant::now();
        let (_, mut conn) = client
            .connect(
                now,
                client_config,
                at,
                holdfast_forward::identity::SERVER_NAME,
            )
            .expect("connect");
        let mut out = Vec::new();
        let sent = conn.poll_transmit(now, 1, &mut out).expect("an Initial");
        let initial = BytesMut::from(&out[..sent.size]);
        let mut buf = Vec::new();
        match node.handle(now, from, None, None, initial, &mut buf) {
            Some(DatagramEvent::NewConnection(incoming)) => decide(&mut node, incoming, &mut buf),
            _ => panic!("the node's endpoint did not hold the attempt"),
        }
    }

    // i[verify attack.budgets+3]
    #[test]
    fn the_node_s_own_endpoint_answers_are_read_as_what_they_are() {
        // A Retry.
        let retry = node_answers(|node, incoming, buf| {
            let t = node.retry(incoming, buf).expect("a Retry");
            vec![buf[..t.size].to_vec()]
        });
        assert_eq!(retry.len(), 1);
        assert_eq!(classify(&retry[0]), Answer::Retry);
        // A refusal: a CONNECTION_CLOSE in an Initial.
        let refused = node_answers(|node, incoming, buf| {
            let t = node.refuse(incoming, buf);
            vec![buf[..t.size].to_vec()]
        });
        assert_eq!(refused.len(), 1);
        assert_eq!(classify(&refused[0]), Answer::Refused);
        // Accepted: the first flight, its Initial and Handshake packets coalesced (the fixed
        // bit greased), is the node going further.
        let flight = node_answers(|node, incoming, buf| {
            let (_, mut conn) = node
                .accept(incoming, std::time::Instant::now(), buf, None)
                .expect("accepted");
            let mut out = Vec::new();
            let t = conn
                .poll_transmit(std::time::Instant::now(), 1, &mut out)
                .expect("the first flight");
            vec![out[..t.size].to_vec()]
        });
        assert_eq!(flight.len(), 1);
        assert_eq!(classify(&flight[0]), Answer::Handshake);
        // The node greases the fixed bit at random (RFC 9287: the client offers it), so its
        // first packet is read the same with the bit set or clear.
        for mut answer in [refused[0].clone(), flight[0].clone()] {
            let read = classify(&answer);
            answer[0] ^= 0x40;
            assert_eq!(classify(&answer), read, "{:#04x}", answer[0]);
        }
    }

    // i[verify attack.budgets+3]
    #[test]
    fn version_negotiation_is_the_node_going_no_further_not_an_overreach() {
        let mut vn = vec![0x80, 0, 0, 0, 0];
        vn.extend(ids(&[1; 8], &[2; 8]));
        vn.extend_from_slice(&V1);
        assert_eq!(classify(&vn), Answer::VersionNegotiation);
    }

    fn cid() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..=20)
    }

    proptest! {
        #[test]
        fn any_bytes_give_an_answer_and_never_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..1500),
        ) {
            let _ = classify(&bytes);
        }

        #[test]
        fn coalesced_initials_are_a_refusal_until_a_handshake_packet_joins_them(
            packets in proptest::collection::vec(
                (cid(), cid(), proptest::collection::vec(any::<u8>(), 0..100),
                 proptest::collection::vec(any::<u8>(), 0..300)),
                1..4,
            ),
            handshake_at in any::<prop::sample::Index>(),
            padding in 0usize..200,
        ) {
            let mut datagram = Vec::new();
            let mut packets_bytes: Vec<Vec<u8>> = packets
                .iter()
                .map(|(d, s, token, payload)| initial(d, s, token, payload))
                .collect();
            for p in &packets_bytes {
                datagram.extend_from_slice(p);
            }
            datagram.extend(std::iter::repeat_n(0u8, padding));
            prop_assert_eq!(classify(&datagram), Answer::Refused);
            let at = handshake_at.index(packets_bytes.len() + 1);
            packets_bytes.insert(at, long(2, &packets[0].0, &packets[0].1, &[8; 40]));
            let with: Vec<u8> = packets_bytes.concat();
            prop_assert_eq!(classify(&with), Answer::Handshake);
        }

        #[test]
        fn a_retry_with_any_ids_and_token_is_a_retry(
            d in cid(), s in cid(), token in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            prop_assert_eq!(classify(&retry(&d, &s, &token)), Answer::Retry);
        }
    }
}
