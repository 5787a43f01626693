//! holdfast: the node binary's library — config, module supervision, the admin API and CLI.
//!
//! The binary (`holdfast`) is a thin shell over [`run::run`] and [`admin::client`]; everything
//! is here so that tests can drive the supervisor with test modules under tokio's paused clock.
//!
//! The config is layered: [`config`]'s low layer is the TOML schema with spans, its validation
//! locates every refusal at `FILE:LINE:COL`, and its high layer converts the validated schema into
//! each module's own config; [`modules`], [`admin`], [`run`] and [`reload`] consume that, and
//! [`config`] imports none of them.
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

pub mod admin;
pub mod cli;
pub mod config;
pub mod duration;
pub mod forward_client;
pub mod logging;
pub mod metrics;
pub mod module;
pub mod modules;
pub mod notify;
pub mod reload;
pub mod render;
pub mod run;
pub mod slot;
pub mod state;
pub mod supervisor;
pub mod version;
