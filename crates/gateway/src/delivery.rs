//! Pushes across the cluster: to a user on every replica the routing map names for them, and to a room on
//! every replica.

use std::sync::atomic::Ordering;

use crate::bus::BusMessage;
use crate::server::{Delivery, Gateway};

/// Whether a push went on to other replicas through the bus.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Forward {
    /// Not needed: the user is routed here or nowhere.
    #[default]
    #[serde(rename = "none")]
    NotNeeded,
    /// Handed to the bus (for a user: for every other replica the user is routed to).
    Published,
    /// The routing map or the bus failed (for a user: for at least one of their replicas); the
    /// recipients it did not reach did not get it.
    Failed,
}

/// How many locks room pushes are spread over (rooms that share one are serialized together).
pub(crate) const ROOM_LOCK_STRIPES: usize = 64;

impl crate::server::Inner {
    // r[impl gateway.history.order]
    /// The lock a push to `room` holds from its position to its broadcast.
    pub(crate) fn room_lock(&self, room: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let h = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(room);
        let i = usize::try_from(h % ROOM_LOCK_STRIPES as u64).unwrap_or(0);
        &self.room_locks[i]
    }
}

impl Gateway {
    // r[impl gateway.cluster.push-user+2]
    /// Pushes to `user`'s connections on this replica, and to every other replica the routing
    /// map names for them (a user may be connected to several). A routing or bus outage is
    /// reported in [`Delivery::forwarded`], never fatal.
    pub async fn push_user(&self, user: &str, text: &str) -> Delivery {
        if let Some(refused) = self.refuse_too_large(text) {
            return refused;
        }
        let mut delivery = self.push_user_local(user, text);
        let inner = &self.inner;
        let forwarded = match inner.routing.routes(user).await {
            Ok(replicas) => {
                let message = BusMessage::User {
                    user: user.to_owned(),
                    text: text.to_owned(),
                };
                let sends = replicas
                    .iter()
                    .filter(|r| **r != inner.replica.id)
                    .map(|to| {
                        let sent = inner.membership.bus.send_to(to, &message);
                        async move { (to, sent.await) }
                    });
                let mut forwarded = Forward::NotNeeded;
                for (to, sent) in futures_util::future::join_all(sends).await {
                    match sent {
                        Ok(()) if forwarded == Forward::NotNeeded => {
                            forwarded = Forward::Published;
                        }
                        Ok(()) => {}
                        Err(e) => {
                            tracing::warn!(replica = %inner.replica.id, to = %to, error = %e, "cannot forward a push");
                            forwarded = Forward::Failed;
                        }
                    }
                }
                forwarded
            }
            Err(e) => {
                tracing::warn!(replica = %inner.replica.id, error = %e, "cannot look up a route");
                Forward::Failed
            }
        };
        if forwarded == Forward::Failed {
            inner
                .membership
                .forward_errors
                .fetch_add(1, Ordering::Relaxed);
        }
        delivery.forwarded = forwarded;
        delivery
    }

    // r[impl gateway.cluster.push-room]
    /// Pushes to `room`'s members on this replica, and broadcasts it so every other replica
    /// pushes it to its members. A bus outage is reported in [`Delivery::forwarded`].
    pub async fn push_room(&self, room: &str, text: &str) -> Delivery {
        if let Some(refused) = self.refuse_too_large(text) {
            return refused;
        }
        let inner = &self.inner;
        let _order = inner.room_lock(room).lock().await;
        let pos = self.remember(room, text).await;
        let mut delivery = match pos {
            Some(pos) => self.push_room_local(room, &crate::history::frame(room, pos, text)),
            None => self.push_room_local(room, text),
        };
        delivery.pos = pos;
        let message = BusMessage::Room {
            room: room.to_owned(),
            text: text.to_owned(),
            origin: inner.replica.id.clone(),
            pos: pos.map(|p| p.to_string()),
        };
        delivery.forwarded = match inner.membership.bus.broadcast(&message).await {
            Ok(()) => Forward::Published,
            Err(e) => {
                tracing::warn!(replica = %inner.replica.id, error = %e, "cannot broadcast a push");
                inner
                    .membership
                    .forward_errors
                    .fetch_add(1, Ordering::Relaxed);
                Forward::Failed
            }
        };
        delivery
    }

    // r[impl gateway.history.bounds]
    /// A push larger than the message size limit is refused (so history holds no larger one).
    fn refuse_too_large(&self, text: &str) -> Option<Delivery> {
        (text.len() > self.inner.config.max_message_size).then(|| Delivery {
            too_large: true,
            ..Delivery::default()
        })
    }

    // r[impl gateway.history.position]
    /// Appends a room message to the room's history; its position, or `None` when history is
    /// off or its backend failed (the message is then pushed without a position, reported).
    async fn remember(&self, room: &str, text: &str) -> Option<crate::history::Pos> {
        let inner = &self.inner;
        if inner.config.history.size == 0 {
            return None;
        }
        match inner
            .history
            .append(room, text, &inner.config.history)
            .await
        {
            Ok(pos) => Some(pos),
            Err(e) => {
                tracing::warn!(replica = %inner.replica.id, error = %e, "cannot keep a room message in history");
                None
            }
        }
    }
}
