//! Any bytes as a QUIC datagram: decoding never panics, and what decodes re-encodes to the same
//! bytes when its varints were minimal.
#![no_main]

use holdfast_forward_wire::wire::{decode_datagram, encode_datagram};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((id, payload)) = decode_datagram(data) {
        let encoded = encode_datagram(id, payload);
        assert!(encoded.len() <= data.len());
        let (again, body) = decode_datagram(&encoded).expect("re-encoded datagram decodes");
        assert_eq!((again, body), (id, payload));
    }
});
