//! Cross-replica delivery: the bus a replica publishes pushes on when their recipients are
//! elsewhere, and its in-process twin ([`MemoryBus`]). The Redis implementation is
//! [`crate::RedisBus`].
//!
//! Two destinations exist: one replica (a push to a user routed there) and every replica (a push
//! to a room, whose members may be anywhere). A broadcast reaches its sender too; the sender
//! recognises its own `origin` and skips it, because it has already delivered locally.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use holdfast_lifecycle::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::ClusterError;

/// Messages a subscription buffers before the bus drops new ones for it (counted in
/// [`BusStats::dropped`]): a stalled gateway must not make the bus grow without bound.
pub const SUBSCRIPTION_BUFFER: usize = 4096;

/// A push travelling between replicas.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BusMessage {
    /// For a user's connections on the receiving replica.
    User {
        /// The user.
        user: String,
        /// The text to push.
        text: String,
    },
    /// For a room's members on every replica but `origin`.
    Room {
        /// The room.
        room: String,
        /// The text to push.
        text: String,
        /// The replica that published it (and delivered it locally already).
        origin: String,
        /// Its position in the room's history, when it has one (absent from older replicas).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pos: Option<String>,
        /// The position before it in the room's stream, when the history published it in the
        /// step that appended it (so receivers can tell a message that has not reached them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prev: Option<String>,
        /// The first position of the stream the append that gave it its position wrote to: the
        /// stream's identity, which tells a stream created again from the one before it whatever
        /// their positions (absent from older replicas and streams).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start: Option<String>,
    },
}

/// The counters of a bus, as a snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BusStats {
    /// Messages published.
    pub published: u64,
    /// Publishes that failed (the backend was down or answered an error).
    pub publish_errors: u64,
    /// Messages received by this process's subscriptions.
    pub received: u64,
    /// Messages dropped because a subscription's buffer was full, or unreadable.
    pub dropped: u64,
    /// Subscriptions (re)established.
    pub subscribed: u64,
    /// Subscriber outages that were transient (connection refused, reset, timed out).
    pub outages_transient: u64,
    /// Subscriber outages that will not pass by themselves (authentication, configuration);
    /// still retried, at the back-off's cap.
    pub outages_persistent: u64,
}

/// The counters behind [`BusStats`], shared by a bus and its subscriber tasks.
#[derive(Debug, Default)]
pub(crate) struct BusCounters {
    pub(crate) published: AtomicU64,
    pub(crate) publish_errors: AtomicU64,
    pub(crate) received: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) subscribed: AtomicU64,
    pub(crate) outages_transient: AtomicU64,
    pub(crate) outages_persistent: AtomicU64,
    /// Subscriptions up now.
    pub(crate) live: AtomicU64,
}

impl BusCounters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> BusStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BusStats {
            published: get(&self.published),
            publish_errors: get(&self.publish_errors),
            received: get(&self.received),
            dropped: get(&self.dropped),
            subscribed: get(&self.subscribed),
            outages_transient: get(&self.outages_transient),
            outages_persistent: get(&self.outages_persistent),
        }
    }

    /// Hands a received message to the subscription, dropping it when the buffer is full.
    pub(crate) fn deliver(&self, tx: &mpsc::Sender<BusMessage>, message: BusMessage) -> bool {
        match tx.try_send(message) {
            Ok(()) => {
                Self::bump(&self.received);
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                Self::bump(&self.dropped);
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

/// What a replica receives from the bus. [`BusSubscription::close`] ends it and returns once
/// the bus no longer counts it; dropping it ends it too, but without waiting (a Redis
/// subscriber's connection then closes a moment later).
#[derive(Debug)]
pub struct BusSubscription {
    rx: mpsc::Receiver<BusMessage>,
    task: Option<JoinHandle<()>>,
}

impl BusSubscription {
    /// A subscription fed by `rx`, with the task that feeds it, if any: the task must end once
    /// `rx` is closed ([`mpsc::Sender::closed`]), and is aborted when the subscription is
    /// dropped.
    pub fn new(rx: mpsc::Receiver<BusMessage>, task: Option<JoinHandle<()>>) -> Self {
        Self { rx, task }
    }

    /// The next message; `None` once the bus is gone.
    pub async fn recv(&mut self) -> Option<BusMessage> {
        self.rx.recv().await
    }

    /// Ends the subscription: when this returns, a send to this subscription reaches nobody
    /// and says so (for Redis, its UNSUBSCRIBE has been answered, or its connection is gone).
    /// Bounded by the bus's own call timeout; cancelled, it still ends the subscription, as a
    /// drop does.
    pub async fn close(mut self) {
        // Closing the channel is what a feeding task watches for; the memory bus's senders see
        // it at their next send.
        self.rx.close();
        if let Some(task) = self.task.as_mut() {
            let _ = task.await;
        }
    }
}

impl Drop for BusSubscription {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Cross-replica delivery.
pub trait ClusterBus: Send + Sync + 'static {
    /// Sends `message` to the replica `replica`; an error when it is not subscribed (the
    /// message reached nobody).
    fn send_to(&self, replica: &str, message: &BusMessage) -> BoxFuture<Result<(), ClusterError>>;
    /// Sends `message` to every replica, the sender included.
    fn broadcast(&self, message: &BusMessage) -> BoxFuture<Result<(), ClusterError>>;
    /// The channel room messages are broadcast on, when a history on the same backend can
    /// publish on it itself, in the step that appends the message (Redis pub/sub); `None` when
    /// it cannot (the memory bus).
    fn atomic_room_channel(&self) -> Option<String> {
        None
    }
    /// Whether this bus's subscription is known to be down (nothing sent now reaches it).
    fn subscription_down(&self) -> bool {
        false
    }
    /// Starts receiving what is sent to `replica` and what is broadcast. The subscription stays
    /// up (reconnecting through outages) until it is dropped. Needs a tokio runtime.
    fn subscribe(&self, replica: &str) -> BusSubscription;
    /// The bus's counters.
    fn stats(&self) -> BusStats;
}

/// The in-process bus: every [`Gateway`](crate::Gateway) started on one `MemoryBus` (clones
/// share it) is a replica of one cluster.
#[derive(Debug, Clone, Default)]
pub struct MemoryBus {
    subscribers: Arc<Mutex<HashMap<String, Vec<mpsc::Sender<BusMessage>>>>>,
    counters: Arc<BusCounters>,
}

impl MemoryBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Delivers to the subscriptions of `replica` (every replica for `None`); how many.
    fn deliver_to(&self, replica: Option<&str>, message: &BusMessage) -> usize {
        let mut subs = crate::sync::lock(&self.subscribers);
        let mut reached = 0;
        for (id, senders) in subs.iter_mut() {
            if replica.is_some_and(|r| r != id) {
                continue;
            }
            // Dropped subscriptions leave closed senders behind: prune them here.
            senders.retain(|tx| self.counters.deliver(tx, message.clone()));
            reached += senders.len();
        }
        subs.retain(|_, senders| !senders.is_empty());
        reached
    }
}

impl ClusterBus for MemoryBus {
    fn send_to(&self, replica: &str, message: &BusMessage) -> BoxFuture<Result<(), ClusterError>> {
        BusCounters::bump(&self.counters.published);
        let reached = self.deliver_to(Some(replica), message);
        let replica = replica.to_owned();
        Box::pin(async move {
            if reached == 0 {
                return Err(ClusterError::Unavailable(format!(
                    "bus: replica {replica} is not subscribed"
                )));
            }
            Ok(())
        })
    }

    fn broadcast(&self, message: &BusMessage) -> BoxFuture<Result<(), ClusterError>> {
        BusCounters::bump(&self.counters.published);
        self.deliver_to(None, message);
        Box::pin(async { Ok(()) })
    }

    fn subscribe(&self, replica: &str) -> BusSubscription {
        let (tx, rx) = mpsc::channel(SUBSCRIPTION_BUFFER);
        crate::sync::lock(&self.subscribers)
            .entry(replica.to_owned())
            .or_default()
            .push(tx);
        BusCounters::bump(&self.counters.subscribed);
        BusSubscription::new(rx, None)
    }

    fn stats(&self) -> BusStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> BusMessage {
        BusMessage::User {
            user: "ann".into(),
            text: text.into(),
        }
    }

    // r[verify gateway.cluster.bus]
    #[tokio::test]
    async fn memory_bus_sends_to_one_replica_and_broadcasts_to_all() {
        let bus = MemoryBus::new();
        let mut a = bus.subscribe("a");
        let mut b = bus.subscribe("b");
        bus.send_to("b", &user("for b")).await.unwrap();
        let room = BusMessage::Room {
            room: "lobby".into(),
            text: "all".into(),
            origin: "a".into(),
            pos: None,
            prev: None,
            start: None,
        };
        bus.broadcast(&room).await.unwrap();
        assert_eq!(b.recv().await, Some(user("for b")));
        assert_eq!(b.recv().await, Some(room.clone()));
        assert_eq!(a.recv().await, Some(room), "a gets only the broadcast");
        assert!(a.rx.try_recv().is_err());
        drop(b);
        assert!(
            bus.send_to("b", &user("nobody")).await.is_err(),
            "reached nobody"
        );
        assert_eq!(bus.stats().received, 3);
    }

    // r[verify gateway.cluster.bus]
    #[tokio::test]
    async fn a_closed_memory_subscription_reaches_nobody_at_once() {
        let bus = MemoryBus::new();
        let b = bus.subscribe("b");
        bus.send_to("b", &user("before")).await.unwrap();
        b.close().await;
        assert!(bus.send_to("b", &user("after")).await.is_err());
    }

    #[test]
    fn bus_messages_round_trip_as_json() {
        let m = BusMessage::Room {
            room: "r".into(),
            text: "t".into(),
            origin: "o".into(),
            pos: None,
            prev: None,
            start: None,
        };
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"room","room":"r","text":"t","origin":"o"}"#
        );
        assert_eq!(serde_json::from_str::<BusMessage>(&json).unwrap(), m);
    }
}
