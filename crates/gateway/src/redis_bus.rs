//! Cross-replica delivery over Redis pub/sub.
//!
//! Two channels per cluster prefix: `{prefix}replica:{id}` (pushes for users routed to that
//! replica) and `{prefix}rooms` (room pushes, for every replica). Pub/sub is at most once: what
//! is published while a subscriber is reconnecting does not reach it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use holdfast_lifecycle::BoxFuture;
use holdfast_retry::{Class, Classify};
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::bus::{
    BusCounters, BusMessage, BusStats, BusSubscription, ClusterBus, SUBSCRIPTION_BUFFER,
};
use crate::error::ClusterError;
use crate::redis_conn::{RedisConn, classified};

/// How often a subscriber pings Redis to notice a connection that went silent.
pub const SUBSCRIBER_PING: Duration = Duration::from_secs(5);

/// How long a subscription must stay up to end an outage's back-off streak.
const MUST_LAST: Duration = Duration::from_secs(2);

/// The bus on Redis pub/sub.
#[derive(Clone)]
pub struct RedisBus {
    conn: RedisConn,
    prefix: String,
    seed: u64,
    counters: Arc<BusCounters>,
}

impl std::fmt::Debug for RedisBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("RedisBus")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisBus {
    /// A bus on the Redis at `url`, its channels under `prefix`; each publish and each
    /// (re)subscription is bounded by `timeout`, and the subscriber's reconnects are paced by
    /// holdfast-retry with jitter from `seed`. Nothing is connected until first use.
    pub fn new(
        url: &str,
        prefix: &str,
        timeout: Duration,
        seed: u64,
    ) -> Result<Self, ClusterError> {
        Ok(Self {
            conn: RedisConn::new(url, timeout)?,
            prefix: prefix.to_owned(),
            seed,
            counters: Arc::new(BusCounters::default()),
        })
    }

    /// The channel of one replica.
    pub fn replica_channel(&self, replica: &str) -> String {
        format!("{}replica:{}", self.prefix, replica)
    }

    /// The channel every replica receives room pushes on.
    pub fn rooms_channel(&self) -> String {
        format!("{}rooms", self.prefix)
    }

    /// Publishes `message` on `channel`; how many subscribers received it.
    fn publish(
        &self,
        channel: String,
        message: &BusMessage,
    ) -> BoxFuture<Result<i64, ClusterError>> {
        let payload = match serde_json::to_string(message) {
            Ok(p) => p,
            Err(e) => {
                let e = ClusterError::Config(format!("bus message: {e}"));
                return Box::pin(async move { Err(e) });
            }
        };
        let counters = self.counters.clone();
        let call = self.conn.call(move |mut c| async move {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(payload)
                .query_async::<i64>(&mut c)
                .await
        });
        Box::pin(async move {
            match call.await {
                Ok(receivers) => {
                    BusCounters::bump(&counters.published);
                    Ok(receivers)
                }
                Err(e) => {
                    BusCounters::bump(&counters.publish_errors);
                    Err(e)
                }
            }
        })
    }
}

impl ClusterBus for RedisBus {
    fn send_to(&self, replica: &str, message: &BusMessage) -> BoxFuture<Result<(), ClusterError>> {
        let sent = self.publish(self.replica_channel(replica), message);
        let replica = replica.to_owned();
        Box::pin(async move {
            match sent.await? {
                0 => Err(ClusterError::Unavailable(format!(
                    "bus: replica {replica} is not subscribed"
                ))),
                _ => Ok(()),
            }
        })
    }

    fn broadcast(&self, message: &BusMessage) -> BoxFuture<Result<(), ClusterError>> {
        let sent = self.publish(self.rooms_channel(), message);
        Box::pin(async move { sent.await.map(|_| ()) })
    }

    fn atomic_room_channel(&self) -> Option<String> {
        Some(self.rooms_channel())
    }

    fn subscription_down(&self) -> bool {
        self.counters.live.load(std::sync::atomic::Ordering::SeqCst) == 0
    }

    fn subscribe(&self, replica: &str) -> BusSubscription {
        let (tx, rx) = mpsc::channel(SUBSCRIPTION_BUFFER);
        let channels = vec![self.replica_channel(replica), self.rooms_channel()];
        let task = tokio::spawn(subscriber(self.clone(), channels, tx));
        BusSubscription::new(rx, Some(task))
    }

    fn stats(&self) -> BusStats {
        self.counters.snapshot()
    }
}

/// Why a subscription ended.
enum Lost {
    /// The subscription's receiver is gone: stop.
    Unsubscribed,
    /// The connection failed.
    Outage(ClusterError),
}

// r[impl gateway.cluster.bus-reconnect]
/// Keeps the subscription up: connects and subscribes, forwards messages, and on any outage
/// reconnects paced by the gate. Only closing (or dropping) the subscription ends it.
async fn subscriber(bus: RedisBus, channels: Vec<String>, tx: mpsc::Sender<BusMessage>) {
    let mut backoff = Backoff::new("subscribe", bus.seed);
    loop {
        // A subscription closed during the back-off is not subscribed anywhere: just end.
        let token = tokio::select! {
            token = backoff.ready() => token,
            _ = tx.closed() => return,
        };
        let connect = async {
            let pubsub = bus
                .conn
                .client
                .get_async_pubsub()
                .await
                .map_err(|e| classified(&e))?;
            let (mut sink, stream) = pubsub.split();
            sink.subscribe(&channels)
                .await
                .map_err(|e| classified(&e))?;
            Ok::<_, ClusterError>((sink, stream))
        };
        let lost = match tokio::time::timeout(bus.conn.timeout, connect).await {
            Ok(Ok((sink, stream))) => {
                BusCounters::bump(&bus.counters.subscribed);
                tracing::info!(channels = ?channels, "bus subscribed");
                let lasting = backoff.succeed_provisionally(token, MUST_LAST);
                bus.counters
                    .live
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let lost = relay(&bus, &channels, sink, stream, &tx).await;
                bus.counters
                    .live
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                backoff.ended(lasting);
                lost
            }
            Ok(Err(e)) => {
                backoff.fail(token);
                Lost::Outage(e)
            }
            Err(_) => {
                backoff.fail(token);
                Lost::Outage(ClusterError::Unavailable(
                    "redis: subscribe timed out".into(),
                ))
            }
        };
        match lost {
            Lost::Unsubscribed => return,
            Lost::Outage(e) => {
                let class = e.class();
                match class {
                    Class::Fatal => BusCounters::bump(&bus.counters.outages_persistent),
                    Class::Item | Class::Transient => {
                        BusCounters::bump(&bus.counters.outages_transient)
                    }
                }
                tracing::warn!(error = %e, ?class, failures = backoff.failures(), "bus subscriber lost; reconnecting");
            }
        }
    }
}

/// Forwards messages until the connection fails (or stops answering pings) or the receiver is
/// gone; then it unsubscribes and waits for Redis to confirm, so that a publish after
/// [`BusSubscription::close`] returned counts no subscriber here.
async fn relay(
    bus: &RedisBus,
    channels: &[String],
    mut sink: redis::aio::PubSubSink,
    mut stream: redis::aio::PubSubStream,
    tx: &mpsc::Sender<BusMessage>,
) -> Lost {
    let mut ping = tokio::time::interval(SUBSCRIBER_PING);
    ping.tick().await;
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else {
                    return Lost::Outage(ClusterError::Unavailable("redis: subscription closed".into()));
                };
                match serde_json::from_slice::<BusMessage>(msg.get_payload_bytes()) {
                    Ok(m) => {
                        if !bus.counters.deliver(tx, m) {
                            return unsubscribe(bus, channels, &mut sink).await;
                        }
                    }
                    // Not ours (or from a newer replica): dropped and counted, the channel goes on.
                    Err(_) => BusCounters::bump(&bus.counters.dropped),
                }
            }
            _ = ping.tick() => {
                let answered = tokio::time::timeout(bus.conn.timeout, sink.ping::<redis::Value>()).await;
                match answered {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Lost::Outage(classified(&e)),
                    Err(_) => return Lost::Outage(ClusterError::Unavailable("redis: ping timed out".into())),
                }
            }
            _ = tx.closed() => return unsubscribe(bus, channels, &mut sink).await,
        }
    }
}

/// Unsubscribes from `channels` and waits for the answer (within the call timeout): Redis runs
/// commands one at a time, so any PUBLISH it handles after that answer counts no subscriber
/// here. Failing that, the connection is dropped, which ends the subscription as well.
async fn unsubscribe(
    bus: &RedisBus,
    channels: &[String],
    sink: &mut redis::aio::PubSubSink,
) -> Lost {
    let answered = tokio::time::timeout(bus.conn.timeout, sink.unsubscribe(channels)).await;
    if !matches!(answered, Ok(Ok(()))) {
        tracing::warn!(channels = ?channels, "bus unsubscribe unanswered; dropping the connection");
    }
    Lost::Unsubscribed
}
