//! Any bytes as a control stream: framing never panics, and every message that decodes
//! round-trips through the encoder.
#![no_main]

use holdfast_forward_wire::control::{FrameDecoder, FrameError, decode_body, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = FrameDecoder::new();
    // Split the input in two pushes, as a stream would deliver it.
    let (a, b) = data.split_at(data.len() / 2);
    decoder.push(a);
    decoder.push(b);
    while let Some(next) = decoder.next_message() {
        match next {
            Ok(message) => {
                let frame = encode(&message);
                assert_eq!(decode_body(&frame[4..]).expect("re-encoded frame decodes"), message);
            }
            Err(FrameError::TooLong(_)) => break,
            Err(FrameError::Version(_) | FrameError::Malformed(_)) => {}
        }
    }
});
