#![doc = include_str!("../README.md")]

mod http;
mod resp;

pub use http::{Response, Target, http_request, tls_config};
pub use resp::resp_command;

/// Errors of these small clients: the tests only report them.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
