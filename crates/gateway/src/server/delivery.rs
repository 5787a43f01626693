//! Pushes across the cluster: to a user on every replica the routing map names for them, and to
//! a room on every replica, in position order where the history publishes what it appends.

use std::collections::HashMap;

use crate::bus::BusMessage;
use crate::history::{Appended, Pos, Recovery, RoomAnnounce};
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

/// How long a room's last position is kept after its last message: longer than any message
/// stays on the bus, so a room forgotten here has nothing in flight to this replica.
pub(crate) const ROOM_ORDER_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// What one room lock guards besides the order of pushes: the last position seen here of each
/// of its rooms whose messages carry their predecessor's position (a cluster on Redis), with
/// when it was seen; rooms idle for [`ROOM_ORDER_IDLE`] are forgotten.
#[derive(Debug, Default)]
pub(crate) struct RoomOrder {
    last: HashMap<String, (Pos, tokio::time::Instant)>,
    /// The identity (first position) of the stream each tracked room's last position is in,
    /// when known: a message of another stream starts the room over.
    start: HashMap<String, Pos>,
    /// The identity of the stream each room followed before its current one, with the last
    /// position of it seen here: a late message of it is not followed back (it is skipped,
    /// counted as lost when past that position, else a copy of one seen).
    retired: HashMap<String, (Pos, Option<Pos>)>,
    updates: u32,
    /// Pushes made here waiting for their message to be delivered from the bus, by room and
    /// position.
    waiters: HashMap<(String, Pos), tokio::sync::oneshot::Sender<Delivery>>,
    /// Deliveries of messages pushed here that were delivered before their push could wait for
    /// them (the copy from the bus, or a gap fill, came first), for that push to report.
    early: HashMap<(String, Pos), Delivery>,
}

/// Where a room message stands to the stream a replica follows for its room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Of the stream followed (or naming none): ordered against the last position seen here, if
    /// any.
    Followed(Option<Pos>),
    /// Of another stream, whose identity this is: the room starts over on it.
    Restart(Pos),
    /// A late message of the stream followed before the current one: skipped, and counted as
    /// lost when `lost`.
    Retired { lost: bool },
}

/// Early deliveries kept at most: one whose push never asks (its append answered an error
/// after running) is dropped with the rest past this, costing only a report.
const EARLY_KEPT: usize = 1024;

impl RoomOrder {
    /// Hands `delivery` to the push waiting for `room`'s message at `pos`, if any; else, when
    /// `keep`, keeps it for that push (which has not asked yet).
    fn fire(&mut self, room: &str, pos: Pos, delivery: Delivery, keep: bool) -> Delivery {
        let key = (room.to_owned(), pos);
        match self.waiters.remove(&key) {
            Some(tx) => {
                let _ = tx.send(delivery);
            }
            None if keep => {
                if self.early.len() >= EARLY_KEPT {
                    self.early.clear();
                }
                self.early.insert(key, delivery);
            }
            None => {}
        }
        delivery
    }

    fn last(&self, room: &str) -> Option<Pos> {
        self.last.get(room).map(|(p, _)| *p)
    }

    fn start(&self, room: &str) -> Option<Pos> {
        self.start.get(room).copied()
    }

    /// Where `room`'s message at `pos`, of the stream `start` (when it names one), stands to
    /// what is followed here.
    fn place(&self, room: &str, start: Option<Pos>, pos: Pos) -> Place {
        let last = self.last(room);
        let Some(s) = start else {
            return Place::Followed(last);
        };
        match self.start(room) {
            Some(known) if known == s => Place::Followed(last),
            Some(_) if let Some((_, seen)) = self.retired.get(room).filter(|(r, _)| *r == s) => {
                Place::Retired {
                    lost: !seen.is_some_and(|l| pos <= l),
                }
            }
            Some(_) => Place::Restart(s),
            // Followed from before streams were named (or from no stream at all: a join with
            // none): one that began after the last seen is a new one.
            None if last.is_some_and(|l| s > l) => Place::Restart(s),
            None => Place::Followed(last),
        }
    }

    /// Records `room`'s message at `pos`, of the stream `start` (when it names one), as the
    /// last seen here. A stream other than the one followed is followed from now on, and the
    /// one left behind is retired with the last position seen of it, read before `pos`
    /// replaces it.
    fn advance(
        &mut self,
        room: &str,
        start: Option<Pos>,
        pos: Pos,
        has_members: impl Fn(&str) -> bool,
    ) {
        if let Some(s) = start {
            self.follow(room, s);
        }
        self.set(room, pos, has_members);
    }

    /// Records that `room` follows the stream `start` from now on; a stream left behind is
    /// retired with the last position seen of it (so [`Self::advance`] calls this first).
    fn follow(&mut self, room: &str, start: Pos) {
        match self.start.insert(room.to_owned(), start) {
            Some(old) if old != start => {
                let seen = self.last(room);
                self.retired.insert(room.to_owned(), (old, seen));
            }
            _ => {}
        }
    }

    /// Forgets `room` (it has no members here).
    fn forget(&mut self, room: &str) {
        self.last.remove(room);
        self.start.remove(room);
        self.retired.remove(room);
    }

    /// Records `room`'s last position; every 256th update also forgets rooms idle for
    /// [`ROOM_ORDER_IDLE`] that have no members here (`has_members`).
    fn set(&mut self, room: &str, pos: Pos, has_members: impl Fn(&str) -> bool) {
        let now = tokio::time::Instant::now();
        self.updates = self.updates.wrapping_add(1);
        if self.updates & 0xff == 0 {
            self.last
                .retain(|r, (_, at)| now.duration_since(*at) < ROOM_ORDER_IDLE || has_members(r));
            let last = &self.last;
            self.start.retain(|r, _| last.contains_key(r));
            self.retired.retain(|r, _| last.contains_key(r));
        }
        match self.last.get_mut(room) {
            Some(entry) => *entry = (pos, now),
            None => {
                self.last.insert(room.to_owned(), (pos, now));
            }
        }
    }
}

/// One room lock.
pub(crate) type RoomStripe = tokio::sync::Mutex<RoomOrder>;

/// The room locks of a gateway, each with the order of its rooms.
pub(crate) struct Rooms {
    stripes: Box<[RoomStripe]>,
}

impl Rooms {
    pub(crate) fn new() -> Self {
        Self {
            stripes: (0..ROOM_LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(RoomOrder::default()))
                .collect(),
        }
    }

    // r[impl gateway.history.order+3]
    /// The lock a push to `room` holds from its position to its broadcast (without a history
    /// that publishes; with one, only while it delivers here), and a delivery from the bus holds
    /// while it delivers.
    pub(crate) fn lock(&self, room: &str) -> &RoomStripe {
        &self.stripes[room_stripe(room)]
    }
}

/// The index of `room`'s lock (and of its delivery queue from the bus).
pub(crate) fn room_stripe(room: &str) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault};
    let h =
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(room);
    usize::try_from(h % ROOM_LOCK_STRIPES as u64).unwrap_or(0)
}

/// A room message's place in its stream, as the append that published it gave it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    pos: Pos,
    /// The position before it in the stream.
    prev: Pos,
    /// The identity (first position) of the stream it is in, when the history keeps one.
    start: Option<Pos>,
}

/// What a room push's append came to.
enum Remembered {
    /// History is off.
    Off,
    /// Appended at a position.
    At(Appended),
    /// The history failed; whether the message was appended (and published) is unknown.
    Failed,
}

impl Gateway {
    /// Whether the history publishes room messages on the bus in the step that appends them.
    fn history_publishes(&self) -> bool {
        self.inner.config.history.size > 0
            && self.inner.membership.bus().atomic_room_channel().is_some()
    }

    // r[impl gateway.cluster.push-user+3]
    /// Pushes to `user`'s connections on this replica, and to every other replica the routing
    /// map names for them (a user may be connected to several). A routing or bus outage is
    /// reported in [`Delivery::forwarded`], never fatal.
    pub async fn push_user(&self, user: &str, text: &str) -> Delivery {
        if let Some(refused) = self.refuse_too_large(text) {
            return refused;
        }
        let mut delivery = self.push_user_local(user, text);
        let inner = &self.inner;
        let forwarded = match inner.routing.route_entries(user).await {
            Ok(replicas) => {
                let message = BusMessage::User {
                    user: user.to_owned(),
                    text: text.to_owned(),
                };
                let sends = replicas
                    .iter()
                    .filter(|(r, _)| *r != inner.replica.id)
                    .map(|to| {
                        let sent = inner.membership.bus().send_to(&to.0, &message);
                        async move { (to, sent.await) }
                    });
                let mut forwarded = Forward::NotNeeded;
                let mut failed = Vec::new();
                for (to, sent) in futures_util::future::join_all(sends).await {
                    // Only sends decide here: a failure is judged below, once the dead are known.
                    match sent {
                        Ok(()) => forwarded = Forward::Published,
                        Err(e) => failed.push((to, e)),
                    }
                }
                // Each failed send asks the registry whether its replica is dead: at once, not
                // one after another, so the push waits one lookup at most.
                let dead = futures_util::future::join_all(
                    failed
                        .iter()
                        .map(|((to, version), _)| self.drop_dead_route(user, to, *version)),
                )
                .await;
                for (((to, _), e), dead) in failed.iter().zip(dead) {
                    if !dead {
                        tracing::warn!(replica = %inner.replica.id, to = %to, error = %e, "cannot forward a push");
                        forwarded = Forward::Failed;
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
            inner.membership.forward_failed();
        }
        delivery.forwarded = forwarded;
        delivery
    }

    // r[impl gateway.cluster.dead-route+2]
    /// After a push to `to` failed: when the service registry no longer lists `to` (its lease
    /// expired, or it deregistered), it is dead, not failing: its entry in `user`'s route is
    /// deleted if it is still at the `version` the push read (so a replica that came back under
    /// the same id and routed the user again since keeps its new entry) and true is answered, so
    /// the push does not count as failed. A registry that cannot tell, or cannot be read, leaves
    /// it a failure.
    async fn drop_dead_route(&self, user: &str, to: &str, version: u64) -> bool {
        let inner = &self.inner;
        match inner.service.lists(to).await {
            Ok(Some(false)) => {}
            Ok(_) => return false,
            Err(e) => {
                tracing::warn!(replica = %inner.replica.id, to, error = %e, "cannot tell whether a replica is registered");
                return false;
            }
        }
        inner.stats.dead_route();
        tracing::info!(replica = %inner.replica.id, to, "a push's replica is no longer registered; dropping it from the user's route");
        if let Err(e) = inner.routing.delete_entry(user, to, version).await {
            inner.stats.routing_error();
            tracing::warn!(replica = %inner.replica.id, to, error = %e, "cannot drop a dead replica from a route");
        }
        true
    }

    // r[impl gateway.cluster.push-room]
    /// Pushes to `room`'s members on this replica, and broadcasts it so every other replica
    /// pushes it to its members. A bus outage is reported in [`Delivery::forwarded`].
    pub async fn push_room(&self, room: &str, text: &str) -> Delivery {
        if let Some(refused) = self.refuse_too_large(text) {
            return refused;
        }
        if let Some(refused) = self.refuse_room_name(room) {
            return refused;
        }
        let inner = &self.inner;
        let publishes = self.history_publishes();
        // With a history that publishes, the append's script fixes the room's order, and the
        // lock only guards what is recorded here: it is not held across the append, where a
        // stalled backend would hold up the bus's deliveries to every room sharing the lock.
        let held = if publishes {
            None
        } else {
            Some(inner.rooms.lock(room).lock().await)
        };
        let appended = self.remember(room, text).await;
        if let Remembered::At(Appended {
            pos,
            prev: Some(prev),
            published: true,
            start,
            ..
        }) = appended
        {
            let order = match held {
                Some(order) => order,
                None => inner.rooms.lock(room).lock().await,
            };
            let mut delivery = self
                .deliver_own(order, room, Seen { pos, prev, start }, text)
                .await;
            delivery.pos = Some(pos);
            delivery.forwarded = Forward::Published;
            return delivery;
        }
        if publishes && matches!(appended, Remembered::Failed) {
            // The script may have run and published it (only its answer was lost): sent again,
            // every member would get it twice. Its copy from the bus, if any, delivers it.
            tracing::warn!(replica = %inner.replica.id, room, "a room push's append failed; not sent again");
            inner.membership.forward_failed();
            return Delivery {
                forwarded: Forward::Failed,
                ..Delivery::default()
            };
        }
        let _order = match held {
            Some(order) => order,
            None => inner.rooms.lock(room).lock().await,
        };
        let pos = match appended {
            Remembered::At(a) => Some(a.pos),
            _ => None,
        };
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
            prev: None,
            start: None,
        };
        delivery.forwarded = match inner.membership.bus().broadcast(&message).await {
            Ok(()) => Forward::Published,
            Err(e) => {
                tracing::warn!(replica = %inner.replica.id, error = %e, "cannot broadcast a push");
                inner.membership.forward_failed();
                Forward::Failed
            }
        };
        delivery
    }

    /// Delivers this replica's push at `pos` to the room's members here, holding the room's lock
    /// `order`. Every replica, this one included, receives it from the bus in position order;
    /// here it is delivered now (or was already, when its copy from the bus came first), after
    /// anything before it that has not arrived yet.
    async fn deliver_own(
        &self,
        mut order: tokio::sync::MutexGuard<'_, RoomOrder>,
        room: &str,
        seen: Seen,
        text: &str,
    ) -> Delivery {
        let inner = &self.inner;
        let pos = seen.pos;
        let key = (room.to_owned(), pos);
        if let Some(early) = order.early.remove(&key) {
            return early;
        }
        let wait = inner.config.room_echo_wait;
        if order.last(room).is_some()
            || inner.registry.members(room).is_empty()
            || wait.is_zero()
            || inner.membership.bus().subscription_down()
        {
            return self
                .deliver_in_order(&mut order, room, seen, text, false)
                .await;
        }
        // Not seen here yet: what was published before it may still be on its way here, and
        // nothing says from where. It is delivered when its own copy arrives from the bus, after
        // those; or, failing that, once the wait expires (counted). No wait while the
        // subscription is down: no copy can come.
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        order.waiters.insert(key.clone(), tx);
        drop(order);
        if let Ok(Ok(delivery)) = tokio::time::timeout(wait, &mut rx).await {
            return delivery;
        }
        let mut order = inner.rooms.lock(room).lock().await;
        if order.waiters.remove(&key).is_none() {
            // Its copy was delivered as the wait expired: that delivery is what it came to.
            return rx.try_recv().unwrap_or_default();
        }
        inner.stats.room_echo_timeout();
        self.deliver_in_order(&mut order, room, seen, text, false)
            .await
    }

    /// Before a connection joins `room` (in a cluster whose history publishes): when this
    /// replica has no last position for the room, takes the last one its stream assigned, so
    /// that a message the bus loses after it is read from the stream; what came before was not
    /// live for the joining member.
    pub(crate) async fn seed_room(&self, room: &str) {
        let inner = &self.inner;
        if !self.history_publishes() || inner.rooms.lock(room).lock().await.last(room).is_some() {
            return;
        }
        match inner
            .history
            .last_assigned_in_stream(room, &inner.config.history)
            .await
        {
            Ok(Some(crate::history::StreamPlace { last, start })) => {
                let mut order = inner.rooms.lock(room).lock().await;
                if order.last(room).is_none() {
                    order.advance(room, start, last, |r| !inner.registry.members(r).is_empty());
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(replica = %inner.replica.id, error = %e, room, "cannot read a room's last position; its first message here fills nothing before it");
            }
        }
    }

    /// Delivers a room message received from the bus to the room's members here: in position
    /// order when it carries its predecessor's position, else as it comes (skipping this
    /// replica's own broadcasts, delivered when they were pushed).
    pub(crate) async fn receive_room(
        &self,
        room: &str,
        text: &str,
        origin: &str,
        pos: Option<&str>,
        prev: Option<&str>,
        start: Option<&str>,
    ) {
        let pos = pos.and_then(|p| p.parse::<Pos>().ok());
        let prev = prev.and_then(|p| p.parse::<Pos>().ok());
        match (pos, prev) {
            (Some(pos), Some(prev)) => {
                let mine = origin == self.inner.replica.id;
                let mut order = self.inner.rooms.lock(room).lock().await;
                let start = start.and_then(|s| s.parse::<Pos>().ok());
                let seen = Seen { pos, prev, start };
                self.deliver_in_order(&mut order, room, seen, text, mine)
                    .await;
            }
            _ if origin == self.inner.replica.id => {}
            (Some(pos), None) => {
                self.push_room_local(room, &crate::history::frame(room, pos, text));
            }
            (None, _) => {
                self.push_room_local(room, text);
            }
        }
    }

    // r[impl gateway.history.order+3]
    /// Delivers `room`'s message at `pos` (whose predecessor in the stream is `prev`) to its
    /// members here, under the room's lock, so they receive the room's messages in position
    /// order: one at or before the last seen here was seen already (pushed here, or read from
    /// the stream) and is skipped; one whose predecessor is past the last seen follows messages
    /// that have not reached this replica (still on the bus, or lost by it), which are read
    /// from the stream and delivered first. What the stream no longer holds is counted as lost.
    /// Rooms without members here are not tracked: a room's first member here reads its place
    /// in the stream when it joins ([`Gateway::seed_room`]).
    async fn deliver_in_order(
        &self,
        order: &mut RoomOrder,
        room: &str,
        seen: Seen,
        text: &str,
        keep: bool,
    ) -> Delivery {
        let Seen { pos, prev, start } = seen;
        let inner = &self.inner;
        // r[impl gateway.history.restart+2]
        // Each message names its stream (the stream's first position): one of a stream other
        // than the one followed here starts the room over, whatever the positions say, and what
        // that stream holds before it is delivered first.
        let (last, restart) = match order.place(room, start, pos) {
            Place::Followed(last) => (last, None),
            Place::Restart(s) => (None, Some(s)),
            Place::Retired { lost } => {
                // A late message of the stream followed before: its place is gone. One at or
                // before the last of it seen here is a copy (its own push's, still on the bus
                // when the room started over), not a loss.
                if lost {
                    inner.stats.room_gap(false);
                }
                return order.fire(room, pos, Delivery::default(), false);
            }
        };
        if last.is_some_and(|l| pos <= l) {
            return Delivery::default();
        }
        if inner.registry.members(room).is_empty() {
            // Not tracked without members here: a room's first member reads its place from
            // the stream when it joins.
            // Nothing to keep for a push: it reports this same empty delivery.
            order.forget(room);
            return order.fire(room, pos, Delivery::default(), false);
        }
        order.advance(room, start, pos, |r| !inner.registry.members(r).is_empty());
        if let Some(s) = restart
            && pos > s
        {
            // The new stream's messages before this one have not been delivered here (its
            // first one's copy may come late, or never): they are read from it (a gap filled),
            // and what it no longer holds (or cannot be read) is counted as lost.
            let filled = match inner.history.held(room, &inner.config.history).await {
                Ok(held) => {
                    let mut first = None;
                    let mut through = None;
                    for (p, t) in held.into_iter().filter(|(p, _)| *p >= s && *p < pos) {
                        let d = self.push_room_local(room, &crate::history::frame(room, p, &t));
                        order.fire(room, p, d, true);
                        first = first.or(Some(p));
                        through = Some(p);
                    }
                    first == Some(s) && through == Some(prev)
                }
                Err(e) => {
                    tracing::warn!(replica = %inner.replica.id, error = %e, room, "cannot read a room's new stream to deliver its first messages");
                    false
                }
            };
            inner.stats.room_gap(filled);
        }
        if let Some(last) = last
            && prev > last
        {
            let filled: Option<bool> = match inner
                .history
                .since(room, last, &inner.config.history)
                .await
            {
                Ok(Recovery::Messages(missed)) => {
                    let mut through = last;
                    for (p, t) in missed.into_iter().filter(|(p, _)| *p > last && *p < pos) {
                        let d = self.push_room_local(room, &crate::history::frame(room, p, &t));
                        // Kept: it may be a push made here that has not asked yet.
                        order.fire(room, p, d, true);
                        through = p;
                    }
                    Some(through >= prev)
                }
                Ok(Recovery::Gap) => {
                    // Part of the gap is gone: what the stream still holds of it is delivered.
                    // A room that had no stream when its member joined (last 0-0): its stream
                    // began after that, so what it holds before this message is all there was
                    // (nothing, when this is its first: no gap at all).
                    let fresh = last == Pos::default();
                    match inner.history.held(room, &inner.config.history).await {
                        Ok(held) => {
                            let mut through = None;
                            for (p, t) in held.into_iter().filter(|(p, _)| *p > last && *p < pos) {
                                let d =
                                    self.push_room_local(room, &crate::history::frame(room, p, &t));
                                order.fire(room, p, d, true);
                                through = Some(p);
                            }
                            match through {
                                None if fresh => None,
                                Some(t) if fresh => Some(t >= prev),
                                _ => Some(false),
                            }
                        }
                        Err(e) => {
                            tracing::warn!(replica = %inner.replica.id, error = %e, room, "cannot read a room's stream to fill a gap");
                            Some(false)
                        }
                    }
                }
                Ok(_) => Some(false),
                Err(e) => {
                    tracing::warn!(replica = %inner.replica.id, error = %e, room, "cannot read a room's stream to fill a gap");
                    Some(false)
                }
            };
            if let Some(filled) = filled {
                inner.stats.room_gap(filled);
            }
        }
        let d = self.push_room_local(room, &crate::history::frame(room, pos, text));
        order.fire(room, pos, d, keep)
    }

    // r[impl gateway.rooms.publish-name+2]
    /// A push to a room no connection could join (its name past the room name limit, which a
    /// live limits update may change) and no connection here is in is refused and counted,
    /// before it reaches the history: members who joined before a live lowering keep hearing it.
    fn refuse_room_name(&self, room: &str) -> Option<Delivery> {
        let refused = self.inner.limits.room_name_too_long(room)
            && self.inner.registry.members(room).is_empty();
        refused.then(|| {
            self.inner.stats.push_refused_room_name();
            Delivery {
                room_name_too_long: true,
                ..Delivery::default()
            }
        })
    }

    // r[impl gateway.history.bounds+2]
    /// A push larger than the message size limit is refused (so history holds no larger one),
    /// and counted.
    fn refuse_too_large(&self, text: &str) -> Option<Delivery> {
        (text.len() > self.inner.config.max_message_size).then(|| {
            self.inner.stats.push_refused_too_large();
            Delivery {
                too_large: true,
                ..Delivery::default()
            }
        })
    }

    // r[impl gateway.history.position]
    /// Appends a room message to the room's history, publishing it to every replica in the same
    /// step where the history and the bus allow it; `None` when history is off or its backend
    /// failed (the message is then pushed without a position, reported).
    async fn remember(&self, room: &str, text: &str) -> Remembered {
        let inner = &self.inner;
        if inner.config.history.size == 0 {
            return Remembered::Off;
        }
        let message = BusMessage::Room {
            room: room.to_owned(),
            text: text.to_owned(),
            origin: inner.replica.id.clone(),
            pos: None,
            prev: None,
            start: None,
        };
        let announce = RoomAnnounce {
            channel: inner.membership.bus().atomic_room_channel(),
            message: serde_json::to_string(&message).unwrap_or_default(),
        };
        match inner
            .history
            .append_announced(room, text, &inner.config.history, &announce)
            .await
        {
            Ok(appended) => Remembered::At(appended),
            Err(e) => {
                tracing::warn!(replica = %inner.replica.id, error = %e, "cannot keep a room message in history");
                Remembered::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(hi: u64, lo: u64) -> Pos {
        Pos { hi, lo }
    }

    // r[verify gateway.history.restart+2]
    /// After the room started over on a new stream, a late copy of a message of the stream it
    /// followed before that was delivered here (its own push's copy, still on the bus) is
    /// skipped uncounted; one past what was delivered of that stream here is lost.
    #[test]
    fn a_late_copy_of_the_old_streams_delivered_message_is_not_counted_lost() {
        let members = |_: &str| true;
        let mut order = RoomOrder::default();
        let old = p(10, 7);
        order.advance("r", Some(old), old, members);
        order.advance("r", Some(old), p(10, 8), members);
        let new = p(11, 3);
        assert_eq!(order.place("r", Some(new), new), Place::Restart(new));
        order.advance("r", Some(new), new, members);

        for copy in [old, p(10, 8)] {
            assert_eq!(
                order.place("r", Some(old), copy),
                Place::Retired { lost: false },
                "{copy}"
            );
        }
        assert_eq!(
            order.place("r", Some(old), p(10, 9)),
            Place::Retired { lost: true }
        );
        assert_eq!(
            order.place("r", Some(new), p(11, 4)),
            Place::Followed(Some(new))
        );
    }
}
