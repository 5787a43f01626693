//! Two replicas in one process on the in-memory backends (the embedded default's model of a
//! cluster): cross-replica pushes, and a registry that is down at start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use holdfast_gateway::{
    Appended, BusMessage, Cluster, ClusterBus, ClusterError, Forward, Gateway, GatewayConfig,
    History, HistoryConfig, MemoryBus, MemoryHistory, MemoryRegistry, MemoryRouting, Pos, Recovery,
    Replica, RoomAnnounce, RoutingMap, ServiceRegistry,
};
use holdfast_lifecycle::{BoxFuture, StopReason};

fn shared() -> Cluster {
    Cluster {
        registry: Arc::new(MemoryRegistry::new()),
        routing: Arc::new(MemoryRouting::new()),
        bus: Arc::new(MemoryBus::new()),
        seed: None,
        history: None,
    }
}

async fn start_in(cluster: &Cluster, config: GatewayConfig) -> Gateway {
    Gateway::start_cluster(config, cluster.clone())
        .await
        .unwrap()
}

// r[verify gateway.cluster.push-user+3]
// r[verify gateway.cluster.push-room]
// r[verify gateway.cluster.bus]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_reach_users_and_rooms_on_the_other_replica() {
    let cluster = shared();
    let a = start_in(&cluster, config("a")).await;
    let b = start_in(&cluster, config("b")).await;
    let mut ann = member(&a, "ann", "lobby").await;
    let mut bob = member(&b, "bob", "lobby").await;

    // Bob is routed to b: a push made on a reaches him there.
    let d = a.push_user("bob", "to bob").await;
    assert_eq!((d.queued, d.forwarded), (0, Forward::Published));
    assert_eq!(next_text(&mut bob).await, "to bob");
    // Ann is routed here: nothing goes on the bus.
    let d = a.push_user("ann", "to ann").await;
    assert_eq!((d.queued, d.forwarded), (1, Forward::NotNeeded));
    assert_eq!(next_text(&mut ann).await, "to ann");

    // A room push reaches the members on both replicas, each once.
    let d = a.push_room("lobby", "to all").await;
    assert_eq!((d.queued, d.forwarded), (1, Forward::Published));
    assert_eq!(next_text(&mut ann).await, "to all");
    assert_eq!(next_text(&mut bob).await, "to all");
    b.push_user("ann", "after").await;
    assert_eq!(
        next_text(&mut ann).await,
        "after",
        "a did not deliver its own broadcast twice"
    );
    b.push_user("bob", "after").await;
    assert_eq!(next_text(&mut bob).await, "after");

    // A drained replica no longer receives from the bus: a push routed to it fails to go on,
    // reported, while local recipients still get theirs. (Listed again here, as a replica whose
    // lease outlived its subscription would be: one the registry no longer lists is a dead
    // route (`gateway.cluster.dead-route`), not a failure.)
    drop(bob);
    b.drain(StopReason::Shutdown, None).await;
    cluster.registry.register(b.replica()).await.unwrap();
    cluster.routing.set_route("bob", "b").await.unwrap();
    let d = a.push_user("bob", "gone").await;
    assert_eq!((d.queued, d.forwarded), (0, Forward::Failed));
    assert_eq!(a.cluster_health().forward_errors, 1);
    assert_eq!(a.push_room("lobby", "still").await.queued, 1);
    assert_eq!(next_text(&mut ann).await, "still");
}

// r[verify gateway.cluster.push-user+3]
// r[verify gateway.routing.compare-and-delete+2]
/// A user connected to two replicas (twice to one of them) gets a push made on a third on every
/// connection; each replica leaves the user's set only with its last connection of that user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_to_a_user_reaches_every_connection_on_every_replica() {
    let cluster = shared();
    let a = start_in(&cluster, config("a")).await;
    let b = start_in(&cluster, config("b")).await;
    let c = start_in(&cluster, config("c")).await;
    let ann_a = member(&a, "ann", "lobby").await;
    let mut ann_b1 = member(&b, "ann", "lobby").await;
    let ann_b2 = member(&b, "ann", "lobby").await;
    assert_eq!(cluster.routing.routes("ann").await.unwrap(), ["a", "b"]);

    let d = c.push_user("ann", "from c").await;
    assert_eq!((d.queued, d.forwarded), (0, Forward::Published));
    let mut clients = [ann_a, ann_b1, ann_b2];
    for ws in &mut clients {
        assert_eq!(next_text(ws).await, "from c");
    }
    // From a replica that holds some of her connections: those at once, the others forwarded.
    let d = a.push_user("ann", "from a").await;
    assert_eq!((d.queued, d.forwarded), (1, Forward::Published));
    for ws in &mut clients {
        assert_eq!(next_text(ws).await, "from a");
    }

    // One of two connections on b closes: b stays in her set.
    let [ann_a, b1, ann_b2] = clients;
    ann_b1 = b1;
    drop(ann_b2);
    eventually("b's second connection torn down", || b.connections() == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(cluster.routing.routes("ann").await.unwrap(), ["a", "b"]);
    // Her only connection on a closes: a leaves her set, b's entry stays.
    drop(ann_a);
    eventually("a released its route", || {
        futures_util::FutureExt::now_or_never(cluster.routing.routes("ann"))
            .and_then(Result::ok)
            .is_some_and(|r| r == ["b"])
    })
    .await;
    let d = c.push_user("ann", "still").await;
    assert_eq!((d.queued, d.forwarded), (0, Forward::Published));
    assert_eq!(next_text(&mut ann_b1).await, "still");
    assert_eq!(c.cluster_health().forward_errors, 0);
}

/// One history shared by every replica that publishes each message it appends on the shared bus
/// in the same step, under one lock, with its predecessor's position: the in-process model of
/// the Redis append script. With `announce` off it only appends (the order before the fix).
#[derive(Clone)]
struct Streams {
    history: Arc<MemoryHistory>,
    bus: MemoryBus,
    last: Arc<Mutex<HashMap<String, Pos>>>,
    announce: bool,
}

impl History for Streams {
    fn append(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Pos, ClusterError>> {
        self.history.append(room, text, config)
    }

    fn since(
        &self,
        room: &str,
        since: Pos,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Recovery, ClusterError>> {
        self.history.since(room, since, config)
    }

    fn append_announced(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
        announce: &RoomAnnounce,
    ) -> BoxFuture<Result<Appended, ClusterError>> {
        if !self.announce {
            let pos = self
                .history
                .append_at(room, text, config, std::time::Instant::now());
            return Box::pin(async move {
                // The reply's way back from the server.
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok(Appended {
                    pos,
                    prev: None,
                    published: false,
                    fresh: false,
                    start: None,
                })
            });
        }
        let mut last = self.last.lock().unwrap();
        let pos = self
            .history
            .append_at(room, text, config, std::time::Instant::now());
        let prev = last
            .insert(room.to_owned(), pos)
            .unwrap_or(Pos { hi: pos.hi, lo: 0 });
        let mut message: BusMessage = serde_json::from_str(&announce.message).unwrap();
        if let BusMessage::Room {
            pos: p, prev: q, ..
        } = &mut message
        {
            *p = Some(pos.to_string());
            *q = Some(prev.to_string());
        }
        drop(self.bus.broadcast(&message));
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(Appended {
                pos,
                prev: Some(prev),
                published: true,
                fresh: false,
                start: None,
            })
        })
    }
}

fn streams(announce: bool) -> Cluster {
    let bus = MemoryBus::new();
    Cluster {
        registry: Arc::new(MemoryRegistry::new()),
        routing: Arc::new(MemoryRouting::new()),
        bus: Arc::new(bus.clone()),
        seed: None,
        history: Some(Arc::new(Streams {
            history: Arc::new(MemoryHistory::with_epoch(7)),
            bus,
            last: Arc::default(),
            announce,
        })),
    }
}

/// The positions of the next `n` room messages `ws` receives.
async fn positions(ws: &mut Client, n: usize) -> Vec<Pos> {
    let mut got = Vec::new();
    for _ in 0..n {
        let v: serde_json::Value = serde_json::from_str(&next_raw(ws).await).unwrap();
        got.push(v["pos"].as_str().unwrap().parse().unwrap());
    }
    got
}

// r[verify gateway.history.order+3]
/// Two replicas publish to one room at once and a third only receives: every member on each of
/// the three gets every message once, in strictly increasing position order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_on_every_replica_sees_a_rooms_positions_strictly_increasing() {
    let cluster = streams(std::env::var_os("HOLDFAST_TEST_ORDER_CONTROL").is_none());
    let roomy = |id| {
        let mut c = config(id);
        // The clients read once every push is made: room for all of it.
        c.send_queue = 1024;
        c
    };
    let a = start_in(&cluster, roomy("a")).await;
    let b = start_in(&cluster, roomy("b")).await;
    let c = start_in(&cluster, roomy("c")).await;
    let mut clients = Vec::new();
    for (g, user) in [(&a, "ann"), (&b, "bob"), (&c, "cat"), (&c, "dan")] {
        clients.push(member(g, user, "lobby").await);
    }
    const EACH: usize = 100;
    let mut tasks = Vec::new();
    for g in [a.clone(), b.clone()] {
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                g.push_room("lobby", &format!("m{i}")).await;
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for (i, ws) in clients.iter_mut().enumerate() {
        let got = positions(ws, 2 * EACH).await;
        let inversions = got.windows(2).filter(|w| w[1] <= w[0]).count();
        assert_eq!(
            inversions, 0,
            "client {i}: positions not strictly increasing"
        );
    }
    let lost: u64 = [&a, &b, &c].iter().map(|g| g.stats().room_gaps_lost).sum();
    assert_eq!(lost, 0);
}

/// A registry that fails until `up` is set, counting attempts.
#[derive(Clone, Default)]
struct Flaky {
    up: Arc<AtomicBool>,
    attempts: Arc<AtomicUsize>,
    inner: MemoryRegistry,
}

impl ServiceRegistry for Flaky {
    fn register(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        if self.up.load(Ordering::SeqCst) {
            self.inner.register(replica)
        } else {
            Box::pin(async { Err(ClusterError::Unavailable("connection refused".into())) })
        }
    }
    fn deregister(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        self.inner.deregister(replica)
    }
}

// r[verify gateway.cluster.register]
// r[verify gateway.cluster.ready]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_down_at_start_delays_readiness_and_never_a_client() {
    let flaky = Flaky::default();
    let mut cluster = shared();
    cluster.registry = Arc::new(flaky.clone());
    let a = start_in(&cluster, config("a")).await;
    assert!(
        !a.is_registered() && !a.is_ready(),
        "not ready unregistered"
    );
    // Clients are served all the same.
    let mut ann = member(&a, "ann", "lobby").await;
    a.push_room("lobby", "served").await;
    assert_eq!(next_text(&mut ann).await, "served");
    assert!(!flaky.inner.is_registered("a"));

    flaky.up.store(true, Ordering::SeqCst);
    eventually("registered once the registry is back", || a.is_ready()).await;
    assert!(flaky.inner.is_registered("a"));
    assert!(a.cluster_health().registration_failures >= 1);
    // The client never noticed.
    a.push_room("lobby", "still here").await;
    assert_eq!(next_text(&mut ann).await, "still here");
}

// r[verify gateway.cluster.register]
// r[verify gateway.cluster.jitter-seed]
#[tokio::test(start_paused = true)]
async fn registration_retries_are_paced_and_stop_at_the_drain() {
    let flaky = Flaky::default();
    let mut cluster = shared();
    cluster.registry = Arc::new(flaky.clone());
    let a = start_in(&cluster, config("a")).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    // 100 ms doubling to 5 s: 0.1+0.2+0.4+0.8+1.6+3.2 = 6.3 s, then 5 s steps.
    let in_ten_seconds = flaky.attempts.load(Ordering::SeqCst);
    assert!(
        (6..=8).contains(&in_ten_seconds),
        "paced, not spinning: {in_ten_seconds}"
    );
    let report = a.drain(StopReason::Shutdown, None).await;
    assert_eq!(report.deregistration, holdfast_gateway::Cleanup::Done);
    let at_drain = flaky.attempts.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(flaky.attempts.load(Ordering::SeqCst), at_drain);
    assert!(!flaky.inner.is_registered("a"));
}

/// A registry whose `lists` answers only after a delay (an etcd under load).
struct SlowLists {
    inner: MemoryRegistry,
    delay: Duration,
}

impl ServiceRegistry for SlowLists {
    fn register(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        self.inner.register(replica)
    }
    fn deregister(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        self.inner.deregister(replica)
    }
    fn lists(&self, id: &str) -> BoxFuture<Result<Option<bool>, ClusterError>> {
        let (listed, delay) = (self.inner.lists(id), self.delay);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            listed.await
        })
    }
}

// r[verify gateway.cluster.dead-route+2]
/// A push to a user routed to several dead replicas asks the registry about each at once: it
/// waits one lookup, not one per dead replica; each dead route is dropped, none is a failure.
#[tokio::test(start_paused = true)]
async fn dead_routes_are_looked_up_at_once_not_one_after_another() {
    let routing = MemoryRouting::new();
    let cluster = Cluster {
        registry: Arc::new(SlowLists {
            inner: MemoryRegistry::new(),
            delay: Duration::from_secs(1),
        }),
        routing: Arc::new(routing.clone()),
        bus: Arc::new(MemoryBus::new()),
        seed: None,
        history: None,
    };
    let a = start_in(&cluster, config("a")).await;
    for dead in ["x", "y", "z"] {
        routing.set_route("zed", dead).await.unwrap();
    }
    let began = tokio::time::Instant::now();
    let d = a.push_user("zed", "anyone there?").await;
    let took = began.elapsed();
    assert_eq!(d.forwarded, Forward::NotNeeded, "{d:?}");
    assert_eq!(a.stats().dead_routes, 3);
    assert!(routing.get("zed").is_empty());
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

// r[verify gateway.cluster.dead-route+2]
/// A routing map that wraps another (the tests' counting map) deletes only the entry read: the
/// trait has no default that would fall back to the unconditional delete, so the wrapper forwards
/// the versions and the versioned delete.
#[tokio::test]
async fn a_wrapping_routing_map_keeps_an_entry_written_again_after_the_read() {
    let routing = CountingRouting::default();
    routing.set_route("ann", "x").await.unwrap();
    let read = routing.route_entries("ann").await.unwrap();
    routing.set_route("ann", "x").await.unwrap();
    assert_eq!(
        routing.delete_entry("ann", "x", read[0].1).await,
        Ok(holdfast_gateway::CasOutcome::Stale)
    );
    assert_eq!(routing.routes("ann").await, Ok(vec!["x".to_owned()]));
    assert_eq!(routing.deletes.load(Ordering::SeqCst), 1);
    let now = routing.route_entries("ann").await.unwrap();
    assert_eq!(
        routing.delete_entry("ann", "x", now[0].1).await,
        Ok(holdfast_gateway::CasOutcome::Cleared)
    );
    assert!(routing.routes("ann").await.unwrap().is_empty());
}
