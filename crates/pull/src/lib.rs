//! holdfast-pull: keeps the images a node's workloads need present, through the Docker Engine API.
#![doc = include_str!("../README.md")]

pub mod classify;
pub mod client;
pub mod fault;
pub mod progress;
pub mod watchdog;
