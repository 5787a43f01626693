//! Per-forward counters, shared by a forward's tasks and read by the listing.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::classify::DropReason;

/// Live counters of one forward (cheap atomic updates on the hot path).
#[derive(Debug, Default)]
pub struct Counters {
    to_target_datagrams: AtomicU64,
    to_target_bytes: AtomicU64,
    from_target_datagrams: AtomicU64,
    from_target_bytes: AtomicU64,
    dropped_oversize: AtomicU64,
    dropped_malformed: AtomicU64,
    dropped_unknown_forward: AtomicU64,
    dropped_flow_limit: AtomicU64,
    dropped_error: AtomicU64,
    transient_errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// A snapshot of one forward's counters. "To target" is the direction from the client's local
/// peers towards the target; "from target" the replies.
// r[impl forward.stats]
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ForwardStats {
    /// Datagrams relayed towards the target.
    pub to_target_datagrams: u64,
    /// Payload bytes relayed towards the target.
    pub to_target_bytes: u64,
    /// Datagrams relayed back from the target.
    pub from_target_datagrams: u64,
    /// Payload bytes relayed back from the target.
    pub from_target_bytes: u64,
    /// Datagrams dropped, by reason.
    pub dropped: Drops,
    /// Transient errors met (each reported, none ended the forward).
    pub transient_errors: u64,
    /// The latest error, if any.
    pub last_error: Option<String>,
}

/// Drop counts by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Drops {
    /// Over the connection's current maximum datagram size.
    pub oversize: u64,
    /// Malformed.
    pub malformed: u64,
    /// For a forward that is not open.
    pub unknown_forward: u64,
    /// Over the forward's flow limit.
    pub flow_limit: u64,
    /// Not sent because of a socket error.
    pub error: u64,
}

impl Counters {
    /// One datagram of `bytes` relayed towards the target.
    pub fn to_target(&self, bytes: usize) {
        self.to_target_datagrams.fetch_add(1, Ordering::Relaxed);
        self.to_target_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// `datagrams` datagrams of `bytes` in all relayed towards the target.
    pub fn to_target_many(&self, datagrams: usize, bytes: usize) {
        self.to_target_datagrams
            .fetch_add(datagrams as u64, Ordering::Relaxed);
        self.to_target_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// One datagram of `bytes` relayed back from the target.
    pub fn from_target(&self, bytes: usize) {
        self.from_target_datagrams.fetch_add(1, Ordering::Relaxed);
        self.from_target_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// One datagram dropped.
    pub fn dropped(&self, reason: DropReason) {
        let counter = match reason {
            DropReason::Oversize => &self.dropped_oversize,
            DropReason::Malformed => &self.dropped_malformed,
            DropReason::UnknownForward => &self.dropped_unknown_forward,
            DropReason::FlowLimit => &self.dropped_flow_limit,
            DropReason::Error => &self.dropped_error,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// `datagrams` datagrams of `bytes` in all relayed back from the target.
    pub fn from_target_many(&self, datagrams: usize, bytes: usize) {
        self.from_target_datagrams
            .fetch_add(datagrams as u64, Ordering::Relaxed);
        self.from_target_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A transient error (counted, remembered as the last error).
    pub fn transient(&self, error: &str) {
        self.transient_errors.fetch_add(1, Ordering::Relaxed);
        self.set_last_error(error);
    }

    /// Remembers `error` as the latest.
    pub fn set_last_error(&self, error: &str) {
        let mut last = self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *last = Some(error.to_owned());
    }

    /// The counters now.
    pub fn snapshot(&self) -> ForwardStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ForwardStats {
            to_target_datagrams: load(&self.to_target_datagrams),
            to_target_bytes: load(&self.to_target_bytes),
            from_target_datagrams: load(&self.from_target_datagrams),
            from_target_bytes: load(&self.from_target_bytes),
            dropped: Drops {
                oversize: load(&self.dropped_oversize),
                malformed: load(&self.dropped_malformed),
                unknown_forward: load(&self.dropped_unknown_forward),
                flow_limit: load(&self.dropped_flow_limit),
                error: load(&self.dropped_error),
            },
            transient_errors: load(&self.transient_errors),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }
}

/// Live counters of the node's connections: who was let in, who was not, and why.
#[derive(Debug, Default)]
pub struct ConnectionCounters {
    retried: AtomicU64,
    refused_unauthenticated: AtomicU64,
    refused_per_source: AtomicU64,
    handshake_failed: AtomicU64,
    timed_out: AtomicU64,
    refused_authenticated: AtomicU64,
    refused_per_credential: AtomicU64,
    dropped_unauthenticated: AtomicU64,
    auth_failed: AtomicU64,
    closed_unauthenticated: AtomicU64,
    refused_paced: AtomicU64,
}

/// Why a connection attempt or a connection was turned away, for [`ConnectionCounters::count`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turned {
    /// Answered with a Retry to validate its address.
    Retried,
    /// Refused: the bound on unauthenticated connections in all.
    RefusedUnauthenticated,
    /// Refused: the bound on unauthenticated connections from its source.
    RefusedPerSource,
    /// Its handshake failed.
    HandshakeFailed,
    /// Closed: no handshake and authentication within the authentication timeout.
    TimedOut,
    /// Refused after authenticating: the bound on authenticated connections in all.
    RefusedAuthenticated,
    /// Refused after authenticating: the bound on connections of its credential.
    RefusedPerCredential,
    /// A datagram that arrived before its connection authenticated, dropped.
    DroppedUnauthenticated,
    /// A connection failed to authenticate: a bad credential, another request first, or another
    /// protocol version (a timeout is [`Turned::TimedOut`] only).
    AuthFailed,
    /// A connection was closed by its peer (or idled out by its peer's idle timeout) after its
    /// handshake, before it authenticated.
    ClosedUnauthenticated,
    /// Refused before its handshake: its source failed to authenticate recently.
    RefusedPaced,
}

/// A snapshot of the node's connection counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnectionStats {
    /// Connections in their handshake or not yet authenticated, now.
    pub unauthenticated: u64,
    /// Attempts answered with a Retry (address validation).
    pub retried: u64,
    /// Attempts refused at the bound on unauthenticated connections in all.
    pub refused_unauthenticated: u64,
    /// Attempts refused at the bound on unauthenticated connections from one source.
    pub refused_per_source: u64,
    /// Handshakes that failed.
    pub handshake_failed: u64,
    /// Connections closed for not completing the handshake and authentication in time.
    pub timed_out: u64,
    /// Authenticated connections now.
    pub authenticated: u64,
    /// Connections refused after authenticating, at the bound on authenticated connections.
    pub refused_authenticated: u64,
    /// Connections refused after authenticating, at the bound on one credential's connections.
    pub refused_per_credential: u64,
    /// Datagrams that arrived before their connection authenticated, dropped.
    pub dropped_unauthenticated: u64,
    /// Connections that failed to authenticate: a bad credential, another request first, or
    /// another protocol version (timeouts are `timed_out`).
    pub auth_failed: u64,
    /// Connections their peer closed after the handshake, before authenticating.
    pub closed_unauthenticated: u64,
    /// Attempts refused before their handshake because their source failed to authenticate
    /// recently.
    pub refused_paced: u64,
}

impl ConnectionCounters {
    /// One attempt or connection turned away.
    pub fn count(&self, turned: Turned) {
        let counter = match turned {
            Turned::Retried => &self.retried,
            Turned::RefusedUnauthenticated => &self.refused_unauthenticated,
            Turned::RefusedPerSource => &self.refused_per_source,
            Turned::HandshakeFailed => &self.handshake_failed,
            Turned::TimedOut => &self.timed_out,
            Turned::RefusedAuthenticated => &self.refused_authenticated,
            Turned::RefusedPerCredential => &self.refused_per_credential,
            Turned::DroppedUnauthenticated => &self.dropped_unauthenticated,
            Turned::AuthFailed => &self.auth_failed,
            Turned::ClosedUnauthenticated => &self.closed_unauthenticated,
            Turned::RefusedPaced => &self.refused_paced,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now, with `unauthenticated` and `authenticated` connections held.
    pub fn snapshot(&self, unauthenticated: usize, authenticated: usize) -> ConnectionStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConnectionStats {
            unauthenticated: unauthenticated as u64,
            retried: load(&self.retried),
            refused_unauthenticated: load(&self.refused_unauthenticated),
            refused_per_source: load(&self.refused_per_source),
            handshake_failed: load(&self.handshake_failed),
            timed_out: load(&self.timed_out),
            authenticated: authenticated as u64,
            refused_authenticated: load(&self.refused_authenticated),
            refused_per_credential: load(&self.refused_per_credential),
            dropped_unauthenticated: load(&self.dropped_unauthenticated),
            auth_failed: load(&self.auth_failed),
            closed_unauthenticated: load(&self.closed_unauthenticated),
            refused_paced: load(&self.refused_paced),
        }
    }
}

/// What live updates of the node's credentials and allow-lists ([`crate::Server::update_access`])
/// have done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AccessStats {
    /// Updates installed since the server started.
    pub updates: u64,
    /// Open forwards ended because an update no longer allowed their target (those of a
    /// connection ended for its credential are counted in `connections_ended` only).
    pub forwards_ended: u64,
    /// Connections ended because an update no longer allowed their credential.
    pub connections_ended: u64,
}

/// Live counters behind [`AccessStats`].
#[derive(Debug, Default)]
pub(crate) struct AccessCounters {
    pub(crate) updates: AtomicU64,
    pub(crate) forwards_ended: AtomicU64,
    pub(crate) connections_ended: AtomicU64,
}

impl AccessCounters {
    /// The counters now.
    pub(crate) fn snapshot(&self) -> AccessStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AccessStats {
            updates: load(&self.updates),
            forwards_ended: load(&self.forwards_ended),
            connections_ended: load(&self.connections_ended),
        }
    }
}
