//! holdfast-forward-wire: the bytes a forward's client and node exchange, and nothing else.
//!
//! - [`control`]: the control stream's codec, length-prefixed frames (`u32 length | version |
//!   type | body`) carrying the hello, the forward requests and their answers, the ends;
//! - [`wire`]: a QUIC datagram's header, the forward and flow ids as QUIC varints before the
//!   payload.
//!
//! Both decode a peer's bytes, so both are fuzzed (`crates/forward/fuzz`) and have proptest
//! round-trips. They live apart from holdfast-forward, which re-exports them as
//! `holdfast_forward::{control, wire}`, so that the fuzz build compiles these two modules and their
//! two dependencies (serde, thiserror) rather than the whole QUIC stack the relay needs.
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

pub mod control;
pub mod wire;
