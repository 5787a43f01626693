//! The gateway's counters, as plain fields the node exports as metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::registry::ConnId;
use crate::token::TokenError;

/// Live counters.
#[derive(Debug, Default)]
pub struct Stats {
    accepted: AtomicU64,
    accept_errors: AtomicU64,
    refused_draining: AtomicU64,
    auth_failures: AtomicU64,
    messages_in: AtomicU64,
    messages_out: AtomicU64,
    slow_consumer_drops: AtomicU64,
    routing_errors: AtomicU64,
    close_frames_sent: AtomicU64,
    idle_closed: AtomicU64,
    refused_per_ip: AtomicU64,
    refused_unauthenticated: AtomicU64,
    refused_unauthenticated_per_ip: AtomicU64,
    tls_reloads: AtomicU64,
    tls_reload_failures: AtomicU64,
    tls_expired_refusals: AtomicU64,
    tls_alpn_answered: AtomicU64,
    joins_refused_rooms: AtomicU64,
    joins_refused_name: AtomicU64,
    joins_refused_permission: AtomicU64,
    pushes_refused_room_name: AtomicU64,
    pushes_refused_too_large: AtomicU64,
    token_refused: [AtomicU64; TokenError::REASONS.len()],
    key_reloads: AtomicU64,
    key_reload_failures: AtomicU64,
    room_gaps_filled: AtomicU64,
    room_gaps_lost: AtomicU64,
    room_echo_timeouts: AtomicU64,
    room_bus_dropped: AtomicU64,
    dead_routes: AtomicU64,
    close_sent: Notify,
}

/// A copy of the counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    /// TCP connections accepted.
    pub accepted: u64,
    /// Failed accepts (each reported and survived).
    pub accept_errors: u64,
    /// Upgrades refused with 503 while draining.
    pub refused_draining: u64,
    /// Connections closed for a bad, expired or missing token.
    pub auth_failures: u64,
    /// Text messages received.
    pub messages_in: u64,
    /// Text messages sent.
    pub messages_out: u64,
    /// Connections disconnected because their send queue was full.
    pub slow_consumer_drops: u64,
    /// Routing-map calls that failed.
    pub routing_errors: u64,
    /// Drain close frames sent.
    pub close_frames_sent: u64,
    /// Connections closed at the idle timeout.
    pub idle_closed: u64,
    /// Upgrades refused with 503 because their address held the per-address limit.
    pub refused_per_ip: u64,
    /// Upgrades refused with 503 because the unauthenticated limit was reached.
    pub refused_unauthenticated: u64,
    /// Connections refused because their source held its limit of unauthenticated connections.
    pub refused_unauthenticated_per_ip: u64,
    /// Times a changed TLS pair was loaded.
    pub tls_reloads: u64,
    /// Times a changed TLS pair was rejected (the previous one kept), once per change.
    pub tls_reload_failures: u64,
    /// TLS handshakes refused because the served certificate's leaf had expired.
    pub tls_expired_refusals: u64,
    /// TLS-ALPN-01 (`acme-tls/1`) handshakes answered with a challenge certificate.
    pub tls_alpn_answered: u64,
    /// Joins refused because the connection was already in its limit of rooms.
    pub joins_refused_rooms: u64,
    /// Joins refused because the room's name was longer than the limit.
    pub joins_refused_name: u64,
    /// Joins refused because the token's `rooms` did not allow the room and no subscription
    /// token for it was given, or the one given was refused.
    pub joins_refused_permission: u64,
    /// Room pushes refused because the room's name was longer than the room name limit.
    pub pushes_refused_room_name: u64,
    /// Pushes (to a room or a user) refused because the text was larger than the message size
    /// limit.
    pub pushes_refused_too_large: u64,
    /// Tokens refused, by reason, in the order of [`TokenError::REASONS`] (each also counted in
    /// `auth_failures`).
    pub token_refused: [u64; TokenError::REASONS.len()],
    /// Times changed key files were loaded.
    pub key_reloads: u64,
    /// Times changed key files were rejected (the previous keys kept).
    pub key_reload_failures: u64,
    /// Room messages that reached this replica before some of their predecessors, which were
    /// read from the room's stream and delivered first.
    pub room_gaps_filled: u64,
    /// Room messages that reached this replica before some of their predecessors that the
    /// room's stream no longer held (or could not be read): those were not delivered here.
    pub room_gaps_lost: u64,
    /// Pushes to a room not seen here yet whose own copy did not come back from the bus within
    /// the echo wait: delivered here regardless.
    pub room_echo_timeouts: u64,
    /// Room messages from the bus dropped because their room's delivery queue was full (a later
    /// message of the room reads them from the stream).
    pub room_bus_dropped: u64,
    /// Pushes to a user that found a replica in the user's route no longer registered: its entry
    /// was dropped, and the push not counted as failed.
    pub dead_routes: u64,
}

impl StatsSnapshot {
    /// Both snapshots' counts added (saturating), field by field: the node's totals across
    /// restarts of the gateway.
    pub fn plus(self, o: StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            accepted: self.accepted.saturating_add(o.accepted),
            accept_errors: self.accept_errors.saturating_add(o.accept_errors),
            refused_draining: self.refused_draining.saturating_add(o.refused_draining),
            auth_failures: self.auth_failures.saturating_add(o.auth_failures),
            messages_in: self.messages_in.saturating_add(o.messages_in),
            messages_out: self.messages_out.saturating_add(o.messages_out),
            slow_consumer_drops: self
                .slow_consumer_drops
                .saturating_add(o.slow_consumer_drops),
            routing_errors: self.routing_errors.saturating_add(o.routing_errors),
            close_frames_sent: self.close_frames_sent.saturating_add(o.close_frames_sent),
            idle_closed: self.idle_closed.saturating_add(o.idle_closed),
            refused_per_ip: self.refused_per_ip.saturating_add(o.refused_per_ip),
            refused_unauthenticated: self
                .refused_unauthenticated
                .saturating_add(o.refused_unauthenticated),
            refused_unauthenticated_per_ip: self
                .refused_unauthenticated_per_ip
                .saturating_add(o.refused_unauthenticated_per_ip),
            tls_reloads: self.tls_reloads.saturating_add(o.tls_reloads),
            tls_reload_failures: self
                .tls_reload_failures
                .saturating_add(o.tls_reload_failures),
            tls_expired_refusals: self
                .tls_expired_refusals
                .saturating_add(o.tls_expired_refusals),
            tls_alpn_answered: self.tls_alpn_answered.saturating_add(o.tls_alpn_answered),
            joins_refused_rooms: self
                .joins_refused_rooms
                .saturating_add(o.joins_refused_rooms),
            joins_refused_name: self.joins_refused_name.saturating_add(o.joins_refused_name),
            joins_refused_permission: self
                .joins_refused_permission
                .saturating_add(o.joins_refused_permission),
            pushes_refused_room_name: self
                .pushes_refused_room_name
                .saturating_add(o.pushes_refused_room_name),
            pushes_refused_too_large: self
                .pushes_refused_too_large
                .saturating_add(o.pushes_refused_too_large),
            token_refused: std::array::from_fn(|i| {
                self.token_refused[i].saturating_add(o.token_refused[i])
            }),
            key_reloads: self.key_reloads.saturating_add(o.key_reloads),
            key_reload_failures: self
                .key_reload_failures
                .saturating_add(o.key_reload_failures),
            room_gaps_filled: self.room_gaps_filled.saturating_add(o.room_gaps_filled),
            room_gaps_lost: self.room_gaps_lost.saturating_add(o.room_gaps_lost),
            room_echo_timeouts: self.room_echo_timeouts.saturating_add(o.room_echo_timeouts),
            room_bus_dropped: self.room_bus_dropped.saturating_add(o.room_bus_dropped),
            dead_routes: self.dead_routes.saturating_add(o.dead_routes),
        }
    }

    /// Each token refusal reason's label with its count.
    pub fn token_refusals(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        TokenError::REASONS
            .iter()
            .copied()
            .zip(self.token_refused.iter().copied())
    }
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Stats {
    pub(crate) fn accepted(&self) {
        inc(&self.accepted);
    }
    pub(crate) fn accept_error(&self) {
        inc(&self.accept_errors);
    }
    pub(crate) fn refused(&self) {
        inc(&self.refused_draining);
    }
    pub(crate) fn auth_failure(&self) {
        inc(&self.auth_failures);
    }
    // r[impl gateway.auth.refusal-reasons]
    pub(crate) fn token_refused(&self, e: &TokenError) {
        inc(&self.auth_failures);
        inc(&self.token_refused[e.index()]);
    }
    pub(crate) fn key_reloaded(&self, ok: bool) {
        inc(if ok {
            &self.key_reloads
        } else {
            &self.key_reload_failures
        });
    }
    pub(crate) fn message_in(&self) {
        inc(&self.messages_in);
    }
    pub(crate) fn message_out(&self) {
        inc(&self.messages_out);
    }
    pub(crate) fn idle(&self) {
        inc(&self.idle_closed);
    }
    /// A room message arrived before some of its predecessors: `filled` when the stream still
    /// held them and they were delivered first.
    pub(crate) fn room_gap(&self, filled: bool) {
        inc(if filled {
            &self.room_gaps_filled
        } else {
            &self.room_gaps_lost
        });
    }
    pub(crate) fn room_echo_timeout(&self) {
        inc(&self.room_echo_timeouts);
    }
    pub(crate) fn room_bus_dropped(&self) {
        inc(&self.room_bus_dropped);
    }
    pub(crate) fn dead_route(&self) {
        inc(&self.dead_routes);
    }
    pub(crate) fn routing_error(&self) {
        inc(&self.routing_errors);
    }
    pub(crate) fn slow_consumer(&self, id: ConnId) {
        inc(&self.slow_consumer_drops);
        tracing::info!(conn = %id, "send queue full: slow consumer disconnected");
    }
    pub(crate) fn refused_limit(&self, refusal: crate::limits::Refusal) {
        match refusal {
            crate::limits::Refusal::PerIp => inc(&self.refused_per_ip),
            crate::limits::Refusal::Unauthenticated => inc(&self.refused_unauthenticated),
            crate::limits::Refusal::UnauthenticatedPerIp => {
                inc(&self.refused_unauthenticated_per_ip)
            }
        }
    }
    pub(crate) fn tls_reloaded(&self) {
        inc(&self.tls_reloads);
    }
    pub(crate) fn tls_reload_failed(&self) {
        inc(&self.tls_reload_failures);
    }
    pub(crate) fn tls_expired_refused(&self) {
        inc(&self.tls_expired_refusals);
    }
    pub(crate) fn tls_alpn_answered(&self) {
        inc(&self.tls_alpn_answered);
    }
    pub(crate) fn join_refused(&self, refusal: crate::protocol::JoinRefusal) {
        match refusal {
            crate::protocol::JoinRefusal::TooManyRooms => inc(&self.joins_refused_rooms),
            crate::protocol::JoinRefusal::NameTooLong => inc(&self.joins_refused_name),
            crate::protocol::JoinRefusal::NotPermitted => inc(&self.joins_refused_permission),
            // A bad `since` is the client's error about its own state, not a refused room.
            crate::protocol::JoinRefusal::BadPosition
            | crate::protocol::JoinRefusal::FuturePosition
            | crate::protocol::JoinRefusal::AlreadyJoined => {}
        }
    }
    pub(crate) fn push_refused_room_name(&self) {
        inc(&self.pushes_refused_room_name);
    }
    pub(crate) fn push_refused_too_large(&self) {
        inc(&self.pushes_refused_too_large);
    }
    pub(crate) fn close_sent(&self) {
        inc(&self.close_frames_sent);
        self.close_sent.notify_waiters();
    }

    /// Woken whenever a drain close frame was sent.
    pub(crate) fn close_notify(&self) -> &Notify {
        &self.close_sent
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            accepted: g(&self.accepted),
            accept_errors: g(&self.accept_errors),
            refused_draining: g(&self.refused_draining),
            auth_failures: g(&self.auth_failures),
            messages_in: g(&self.messages_in),
            messages_out: g(&self.messages_out),
            slow_consumer_drops: g(&self.slow_consumer_drops),
            routing_errors: g(&self.routing_errors),
            close_frames_sent: g(&self.close_frames_sent),
            idle_closed: g(&self.idle_closed),
            refused_per_ip: g(&self.refused_per_ip),
            refused_unauthenticated: g(&self.refused_unauthenticated),
            refused_unauthenticated_per_ip: g(&self.refused_unauthenticated_per_ip),
            tls_reloads: g(&self.tls_reloads),
            tls_reload_failures: g(&self.tls_reload_failures),
            tls_expired_refusals: g(&self.tls_expired_refusals),
            tls_alpn_answered: g(&self.tls_alpn_answered),
            joins_refused_rooms: g(&self.joins_refused_rooms),
            joins_refused_name: g(&self.joins_refused_name),
            joins_refused_permission: g(&self.joins_refused_permission),
            pushes_refused_room_name: g(&self.pushes_refused_room_name),
            pushes_refused_too_large: g(&self.pushes_refused_too_large),
            token_refused: std::array::from_fn(|i| g(&self.token_refused[i])),
            key_reloads: g(&self.key_reloads),
            key_reload_failures: g(&self.key_reload_failures),
            room_gaps_filled: g(&self.room_gaps_filled),
            room_gaps_lost: g(&self.room_gaps_lost),
            room_echo_timeouts: g(&self.room_echo_timeouts),
            room_bus_dropped: g(&self.room_bus_dropped),
            dead_routes: g(&self.dead_routes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_add_field_by_field_and_saturate() {
        let a = StatsSnapshot {
            accepted: 1,
            room_gaps_lost: 2,
            pushes_refused_room_name: u64::MAX,
            token_refused: std::array::from_fn(|i| i as u64),
            ..StatsSnapshot::default()
        };
        let b = StatsSnapshot {
            accepted: 10,
            room_bus_dropped: 3,
            pushes_refused_room_name: 1,
            token_refused: std::array::from_fn(|_| 1),
            ..StatsSnapshot::default()
        };
        let sum = a.plus(b);
        assert_eq!(
            (sum.accepted, sum.room_gaps_lost, sum.room_bus_dropped),
            (11, 2, 3)
        );
        assert_eq!(sum.pushes_refused_room_name, u64::MAX);
        assert_eq!(sum.token_refused[3], 4);
        assert_eq!(StatsSnapshot::default().plus(a), a);
    }
}
