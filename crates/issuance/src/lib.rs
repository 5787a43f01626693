//! holdfast-issuance: TLS certificates for a node's hostnames, with one decision before any
//! dispatch.
//!
//! Every tick the [`Issuer`] takes, for every hostname, the pure [`decision::decide`] over (policy,
//! the current certificate, that hostname's attempt history, operator flags, now): valid until
//! renewal, issue now, debounced until T, or blocked (with an expiry and a force-retry). Only when
//! it says issue is a [`Source`] called: ACME ([`acme`], with the node's own HTTP-01
//! [`responder`]) or the local provider ([`local`]). Attempts live in SQLite ([`history`]), one row
//! each, read per hostname, paced through holdfast-retry's pure decision so pacing survives
//! restarts. Certificates go through a checked, atomic [`store`] that other modules read and watch
//! (an expired one is no longer handed out). A certificate may carry several names (one attempt,
//! one history and one block for all of them, keyed by its first name); each new one can be
//! [`deploy`]ed as files for other services and followed by an `on_renew` [`hook`]. The HTTP-01
//! responder can [`redirect`] plain HTTP to https; TLS-ALPN-01 is answered by a listener of its
//! own ([`tls_alpn`]), or by another one on its port that reads its [`AlpnChallenges`]
//! ([`start_with`] and [`TlsAlpnListener::Shared`]: the node hands them to the gateway).
//! [`module::start`] runs it all as a node module.
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

pub mod acme;
pub mod acme_http;
pub mod cert;
pub mod decision;
pub mod deploy;
mod dns01;
mod dns01_error;
mod dns_exec;
mod dns_udp;
pub mod history;
pub mod hook;
pub mod hostname;
pub mod issuer;
pub mod local;
pub mod module;
mod propagation;
pub mod redirect;
pub mod responder;
mod rfc2136;
pub mod source;
pub mod store;
pub mod tls_alpn;

pub use cert::{CertError, CertInfo, CertifiedPair};
pub use decision::{Flags, IssuePolicy, IssueReason, Verdict, decide};
pub use deploy::{DeployConfig, DeployTarget};
pub use dns_exec::ExecProvider;
pub use dns01::{Challenge, Cleanups, Dns01, DnsProvider, Presented, record_name};
pub use dns01_error::Dns01Error;
pub use history::{HistoryDb, HistoryError, Outcome};
pub use issuer::{Hostname, Issuer, ManualWallClock, SystemWallClock, WallClock};
pub use module::{
    Certificates, Issuance, IssuanceConfig, Planner, TlsAlpnListener, start, start_with,
};
pub use propagation::{HickoryLookup, Propagation, TxtLookup};
pub use redirect::{Http01Other, OtherRequests};
pub use responder::{Http01Responder, ResponderLimits, ResponderStats};
pub use rfc2136::{Rfc2136, Rfc2136Config, Rfc2136Error, TsigAlgo, read_secret};
pub use source::{ErrorClass, Source, SourceError};
pub use store::{CertStore, CertWatch};
pub use tls_alpn::{AlpnChallenges, AlpnLimits, AlpnStats, TlsAlpnResponder};
