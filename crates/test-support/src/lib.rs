#![doc = include_str!("../README.md")]

pub mod fault_proxy;
pub mod services;

pub use fault_proxy::{FaultProxy, Mode, UdpConfig, UdpFaultProxy, UdpMode, UdpStats};
