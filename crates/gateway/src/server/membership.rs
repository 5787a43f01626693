//! A gateway's place in its cluster: it registers in the background until the registration
//! holds (not ready until then, clients served all the same), and it delivers what other
//! replicas push to it over the bus.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::backoff::Backoff;
use crate::bus::{BusMessage, BusStats, ClusterBus};
use crate::server::{Gateway, Inner};
use crate::sync::lock;

/// How long one registration attempt may take before it counts as failed.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// The cluster side of a gateway, held in its shared state.
pub(crate) struct Membership {
    bus: Arc<dyn ClusterBus>,
    seed: u64,
    registered: AtomicBool,
    registration_failures: AtomicU64,
    forward_errors: AtomicU64,
    registrar: std::sync::Mutex<Option<AbortHandle>>,
    receiver: std::sync::Mutex<Option<Receiver>>,
}

/// The task delivering from the bus, and how to tell it to close its subscription.
struct Receiver {
    task: tokio::task::JoinHandle<()>,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// How the gateway stands in its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ClusterHealth {
    /// The registration succeeded (and no drain has begun since).
    pub registered: bool,
    /// The registry believes the registration holds now (an etcd lease lost to an outage does
    /// not).
    pub registration_live: bool,
    /// Registration attempts that failed.
    pub registration_failures: u64,
    /// Pushes that could not be handed to the bus or the routing map.
    pub forward_errors: u64,
    /// The registry's counters (lease keep-alive outages, re-registrations).
    pub registry: crate::cluster::RegistryStats,
    /// The bus's counters.
    pub bus: BusStats,
}

impl Membership {
    pub(crate) fn new(bus: Arc<dyn ClusterBus>, seed: u64) -> Self {
        Self {
            bus,
            seed,
            registered: AtomicBool::new(false),
            registration_failures: AtomicU64::new(0),
            forward_errors: AtomicU64::new(0),
            registrar: std::sync::Mutex::new(None),
            receiver: std::sync::Mutex::new(None),
        }
    }

    /// The bus to the other replicas.
    pub(crate) fn bus(&self) -> &dyn ClusterBus {
        self.bus.as_ref()
    }

    /// A push could not be handed to the bus or the routing map.
    pub(crate) fn forward_failed(&self) {
        self.forward_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.registered.load(Ordering::SeqCst)
    }

    /// Starts receiving and registering, and waits for the first registration attempt (which
    /// the registry's own timeout bounds): a healthy cluster lists the replica when its start
    /// returns, a registry that is down only delays readiness. Called once, by
    /// `Gateway::start_cluster`.
    pub(crate) async fn join(inner: &Arc<Inner>) {
        let m = &inner.membership;
        let subscription = m.bus.subscribe(&inner.replica.id);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(receive(inner.clone(), subscription, stopped));
        *lock(&m.receiver) = Some(Receiver { task, stop });
        let (first, first_done) = tokio::sync::oneshot::channel();
        let registrar = tokio::spawn(register(inner.clone(), first));
        *lock(&m.registrar) = Some(registrar.abort_handle());
        let _ = first_done.await;
    }

    /// Stops any registration still being retried (the drain's first step, before it
    /// deregisters, so nothing registers the replica again behind it).
    pub(crate) fn stop_registering(&self) {
        if let Some(task) = lock(&self.registrar).take() {
            task.abort();
        }
        self.registered.store(false, Ordering::SeqCst);
    }

    /// Stops receiving from the bus at once (an abandon): the subscription ends soon after.
    pub(crate) fn abandon(&self) {
        self.stop_registering();
        if let Some(receiver) = lock(&self.receiver).take() {
            receiver.task.abort();
        }
    }

    /// Stops receiving from the bus (the end of a drain): when this returns, the bus has
    /// confirmed the subscription's end, so a send to this replica reaches nobody and says so.
    /// Cancelled (the drain's budget ran out), the subscription still ends, without the wait.
    pub(crate) async fn leave(&self) {
        self.stop_registering();
        let receiver = lock(&self.receiver).take();
        if let Some(mut receiver) = receiver {
            let _ = receiver.stop.send(());
            // Aborted if this wait is cancelled: the subscription is then dropped, not closed.
            let abort = receiver.task.abort_handle();
            let _guard = AbortOnDrop(Some(abort));
            let _ = (&mut receiver.task).await;
        }
    }

    pub(crate) fn health(&self, registry: &dyn crate::ServiceRegistry) -> ClusterHealth {
        let live = registry.is_live();
        ClusterHealth {
            registry: registry.stats(),
            registered: self.is_registered(),
            registration_live: live,
            registration_failures: self.registration_failures.load(Ordering::Relaxed),
            forward_errors: self.forward_errors.load(Ordering::Relaxed),
            bus: self.bus.stats(),
        }
    }
}

// r[impl gateway.cluster.register]
/// Registers the replica, retrying through the gate until it holds. A registry outage delays
/// readiness; it never ends the gateway or touches its clients. `first` is dropped when the
/// first attempt has finished, either way.
async fn register(inner: Arc<Inner>, first: tokio::sync::oneshot::Sender<()>) {
    let m = &inner.membership;
    let mut backoff = Backoff::new("register", m.seed);
    let mut first = Some(first);
    loop {
        let token = backoff.ready().await;
        let attempt =
            tokio::time::timeout(REGISTER_TIMEOUT, inner.service.register(&inner.replica)).await;
        match attempt {
            Ok(Ok(())) => {
                backoff.succeed(token);
                m.registered.store(true, Ordering::SeqCst);
                // Refused when a drain began meanwhile: the gateway stays not ready.
                let _ = inner.phase.registered();
                tracing::info!(replica = %inner.replica.id, "registered");
                return;
            }
            Ok(Err(e)) => {
                let class = holdfast_retry::Classify::class(&e);
                tracing::warn!(replica = %inner.replica.id, error = %e, ?class, "registration failed; retrying");
                backoff.fail(token);
            }
            Err(_) => {
                tracing::warn!(replica = %inner.replica.id, "registration timed out; retrying");
                backoff.fail(token);
            }
        }
        m.registration_failures.fetch_add(1, Ordering::Relaxed);
        first.take();
    }
}

/// Room messages queued per room lock for delivery from the bus; past this a room message is
/// dropped (counted), and the room's next message reads it from the stream.
const ROOM_QUEUE: usize = 1024;

// r[impl gateway.cluster.bus]
// r[impl gateway.history.order+3]
/// Delivers what other replicas sent here: a user's pushes to their connections here, a room's
/// to its members here (skipping this replica's own broadcasts, delivered when they were sent).
/// This loop never waits on a room's lock or on the history: room messages in position order go
/// to one queue per room lock, each delivered by its own task in arrival order, so a room whose
/// delivery waits (a local push holding its lock, a stream read filling a gap) holds up only
/// the rooms sharing its lock, never a user's pushes or other rooms.
async fn receive(
    inner: Arc<Inner>,
    mut subscription: crate::bus::BusSubscription,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let gateway = Gateway {
        inner: inner.clone(),
    };
    let mut queues: Vec<Option<tokio::sync::mpsc::Sender<BusMessage>>> = (0
        ..crate::server::delivery::ROOM_LOCK_STRIPES)
        .map(|_| None)
        .collect();
    loop {
        let message = tokio::select! {
            biased;
            _ = &mut stop => break,
            message = subscription.recv() => message,
        };
        let Some(message) = message else { break };
        match message {
            BusMessage::User { user, text } => {
                gateway.push_user_local(&user, &text);
            }
            BusMessage::Room {
                room,
                text,
                origin,
                pos: Some(pos),
                prev: Some(prev),
                start,
            } => {
                let stripe = crate::server::delivery::room_stripe(&room);
                let Some(queue) = queues.get_mut(stripe) else {
                    continue;
                };
                let queue = queue.get_or_insert_with(|| deliver_rooms(gateway.clone()));
                let message = BusMessage::Room {
                    room,
                    text,
                    origin,
                    pos: Some(pos),
                    prev: Some(prev),
                    start,
                };
                if queue.try_send(message).is_err() {
                    inner.stats.room_bus_dropped();
                }
            }
            BusMessage::Room {
                room,
                text,
                origin,
                pos,
                prev,
                start,
            } => {
                gateway
                    .receive_room(
                        &room,
                        &text,
                        &origin,
                        pos.as_deref(),
                        prev.as_deref(),
                        start.as_deref(),
                    )
                    .await;
            }
        }
    }
    subscription.close().await;
}

/// Starts a task delivering one room lock's queue of room messages from the bus, in order; it
/// ends once the queue's sender is dropped and the queue is empty.
fn deliver_rooms(gateway: Gateway) -> tokio::sync::mpsc::Sender<BusMessage> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(ROOM_QUEUE);
    tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            if let BusMessage::Room {
                room,
                text,
                origin,
                pos,
                prev,
                start,
            } = message
            {
                gateway
                    .receive_room(
                        &room,
                        &text,
                        &origin,
                        pos.as_deref(),
                        prev.as_deref(),
                        start.as_deref(),
                    )
                    .await;
            }
        }
    });
    tx
}

/// Aborts a task when dropped (a no-op once it has ended).
struct AbortOnDrop(Option<AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}
