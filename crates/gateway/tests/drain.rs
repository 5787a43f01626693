//! The drain against real WebSocket clients on loopback: clients that answer, clients that
//! never read, backends that fail, and the control arm (no drain) that shows the opposite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use holdfast_gateway::{
    CasOutcome, Cleanup, ClusterError, MemoryRegistry, MemoryRouting, Replica, RouteCleanup,
    RoutingMap, ServiceRegistry, Step,
};
use holdfast_lifecycle::{BoxFuture, StopReason, StopRequest};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Error as WsError;

/// A registry whose deregistration takes `delay`, then records that it happened.
struct SlowRegistry {
    inner: MemoryRegistry,
    delay: Duration,
}

impl ServiceRegistry for SlowRegistry {
    fn register(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        self.inner.register(replica)
    }
    fn deregister(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        let inner = self.inner.clone();
        let replica = replica.clone();
        let delay = self.delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            inner.deregister(&replica).await
        })
    }
}

/// A backend that is down: registry and routing calls hang (`hang`) or fail at once.
struct DownBackend {
    hang: bool,
    down: Arc<AtomicBool>,
    routing: MemoryRouting,
    registry: MemoryRegistry,
}

impl DownBackend {
    fn outage<T: Send + 'static>(&self) -> BoxFuture<Result<T, ClusterError>> {
        let hang = self.hang;
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            Err(ClusterError::Unavailable("connection refused".into()))
        })
    }
}

impl ServiceRegistry for DownBackend {
    fn register(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        self.registry.register(replica)
    }
    fn deregister(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        if self.down.load(Ordering::SeqCst) {
            return self.outage();
        }
        self.registry.deregister(replica)
    }
}

impl RoutingMap for DownBackend {
    fn set_route(&self, user: &str, replica: &str) -> BoxFuture<Result<(), ClusterError>> {
        self.routing.set_route(user, replica)
    }
    fn routes(&self, user: &str) -> BoxFuture<Result<Vec<String>, ClusterError>> {
        self.routing.routes(user)
    }
    fn compare_and_delete(
        &self,
        user: &str,
        replica: &str,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>> {
        if self.down.load(Ordering::SeqCst) {
            return self.outage();
        }
        self.routing.compare_and_delete(user, replica)
    }
    fn route_entries(&self, user: &str) -> BoxFuture<Result<Vec<(String, u64)>, ClusterError>> {
        self.routing.route_entries(user)
    }
    fn delete_entry(
        &self,
        user: &str,
        replica: &str,
        version: u64,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>> {
        if self.down.load(Ordering::SeqCst) {
            return self.outage();
        }
        self.routing.delete_entry(user, replica, version)
    }
}

fn short_cap(replica: &str, cap_ms: u64) -> holdfast_gateway::GatewayConfig {
    let mut c = config(replica);
    c.drain.total = Duration::from_millis(cap_ms);
    c
}

// r[verify gateway.drain.order]
// r[verify gateway.drain.deregister]
// r[verify gateway.drain.close+2]
// r[verify gateway.drain.signal]
// r[verify gateway.drain.flush]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_answer_get_1012_after_deregistration_with_their_queue_flushed() {
    let node = start(config("a")).await;
    let users = ["ann", "bob", "cat", "dan", "eve"];
    let mut clients = Vec::new();
    for u in users {
        clients.push(member(&node.gateway, u, "lobby").await);
    }
    assert!(node.registry.is_registered("a"));
    assert_eq!(node.routing.count_for("a"), users.len());
    // Queued just before the stop: each must arrive before the close frame.
    for i in 0..20 {
        node.gateway.push_room("lobby", &format!("m{i}")).await;
    }
    let mut readers = Vec::new();
    for mut ws in clients {
        let registry = node.registry.clone();
        let gateway = node.gateway.clone();
        readers.push(tokio::spawn(async move {
            let end = read_to_end(&mut ws, Duration::from_secs(10)).await;
            // Checked when the close frame has arrived: the replica is already out of the
            // registry and not ready.
            (end, registry.is_registered("a"), gateway.is_ready())
        }));
    }
    let started = Instant::now();
    let stopper = node.gateway.stopper();
    let result = stopper
        .stop(StopRequest {
            deadline: started + Duration::from_secs(10),
            reason: StopReason::Restart,
        })
        .await;
    let took = started.elapsed();
    assert!(result.is_ok(), "{result:?}");
    for r in readers {
        let (end, registered, ready) = r.await.unwrap();
        let close = end.close.expect("a close frame");
        assert_eq!(u16::from(close.code), 1012);
        let hint: serde_json::Value = serde_json::from_str(close.reason.as_str()).unwrap();
        let ms = hint["reconnect_in_ms"].as_u64().unwrap();
        assert!((500..2500).contains(&ms), "hint {ms}");
        let want: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
        assert_eq!(
            end.texts, want,
            "every queued message, in order, before the close"
        );
        assert!(!registered, "deregistered before the close frame");
        assert!(!ready);
    }
    assert_eq!(node.routing.count_for("a"), 0, "routes cleared");
    assert_eq!(node.gateway.connections(), 0);
    // The second request returns the first drain's report.
    let report = node.gateway.drain(StopReason::Shutdown, None).await;
    assert_eq!(report.code, 1012);
    assert_eq!(report.connections, 5);
    assert_eq!(report.close_frames_sent, 5);
    assert_eq!(report.closed_in_time, 5);
    assert_eq!(report.force_closed, 0);
    assert_eq!(report.deregistration, Cleanup::Done);
    assert_eq!(report.routes.cleared, 5);
    let order: Vec<Step> = report.steps.iter().map(|s| s.step).collect();
    assert_eq!(
        order,
        [
            Step::StopAccepting,
            Step::Close,
            Step::Handshake,
            Step::Routing
        ]
    );
    assert!(
        took < Duration::from_secs(2),
        "answering clients drain fast: {took:?}"
    );
}

// r[verify gateway.drain.close+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_sends_1001_and_a_fixed_choice_overrides_the_reason() {
    let node = start(config("a")).await;
    let mut ws = member(&node.gateway, "ann", "lobby").await;
    let reader = tokio::spawn(async move { read_to_end(&mut ws, Duration::from_secs(10)).await });
    node.gateway.drain(StopReason::Shutdown, None).await;
    let close = reader.await.unwrap().close.unwrap();
    assert_eq!(u16::from(close.code), 1001);

    let mut c = config("b");
    c.drain.close = holdfast_gateway::CloseChoice::Restart;
    let node = start(c).await;
    let mut ws = member(&node.gateway, "ann", "lobby").await;
    let reader = tokio::spawn(async move { read_to_end(&mut ws, Duration::from_secs(10)).await });
    node.gateway.drain(StopReason::Shutdown, None).await;
    assert_eq!(u16::from(reader.await.unwrap().close.unwrap().code), 1012);
}

// r[verify gateway.drain.refuse]
// r[verify gateway.drain.order]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_during_the_drain_get_503_with_retry_after() {
    let registry = MemoryRegistry::new();
    let slow = SlowRegistry {
        inner: registry.clone(),
        delay: Duration::from_millis(400),
    };
    let gateway = start_backends(config("a"), Arc::new(slow), Arc::new(MemoryRouting::new())).await;
    let mut ws = member(&gateway, "ann", "lobby").await;
    let g = gateway.clone();
    let drain = tokio::spawn(async move { g.drain(StopReason::Restart, None).await });
    eventually("not ready", || !gateway.is_ready()).await;
    // Deregistration is still under way: no close frame may have been sent yet.
    assert!(registry.is_registered("a"));
    assert_eq!(gateway.stats().close_frames_sent, 0);
    let addr = gateway.local_addr();
    let tcp = TcpStream::connect(addr).await.unwrap();
    match tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp).await {
        Err(WsError::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 503);
            assert_eq!(resp.headers()["retry-after"], "2");
        }
        other => panic!("expected a 503, got {:?}", other.map(|_| ())),
    }
    let end = read_to_end(&mut ws, Duration::from_secs(10)).await;
    assert_eq!(u16::from(end.close.unwrap().code), 1012);
    assert!(!registry.is_registered("a"));
    let report = drain.await.unwrap();
    assert_eq!(report.deregistration, Cleanup::Done);
    assert!(report.steps[0].took_ms >= 350, "{:?}", report.steps);
    assert_eq!(gateway.stats().refused_draining, 1);
}

// Step 3 of the order: whoever has not answered the close is force-closed, and counted.
// r[verify gateway.drain.order]
// r[verify gateway.drain.budget]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_are_force_closed_inside_the_cap() {
    let node = start(short_cap("a", 1500)).await;
    let mut silent = Vec::new();
    for i in 0..10 {
        silent.push(member(&node.gateway, &format!("u{i}"), "lobby").await);
    }
    // They stop reading from here on; load their sockets too (within the send queue, so none is
    // dropped as a slow consumer before the drain).
    let big = "x".repeat(32 * 1024);
    for _ in 0..60 {
        node.gateway.push_room("lobby", &big).await;
    }
    let started = Instant::now();
    let report = node.gateway.drain(StopReason::Restart, None).await;
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(1500 + 150),
        "drain took {took:?}"
    );
    assert!(report.took_ms <= 1500 + 100, "{report:?}");
    assert_eq!(report.connections, 10);
    assert_eq!(
        report.force_closed, 10,
        "none answered the close: {report:?}"
    );
    assert_eq!(node.gateway.stats().slow_consumer_drops, 0);
    assert!(!node.registry.is_registered("a"));
    eventually("every connection torn down", || {
        node.gateway.connections() == 0
    })
    .await;
    assert_eq!(node.routing.count_for("a"), 0);
    drop(silent);
}

// Step 2 ends only when each connection the drain began with was sent its close frame or ended,
// each counted once: a client that got its frame and answered it (ended) does not stand in for a
// silent one whose frame is stuck behind what it never read. Step 2 therefore runs to its
// deadline, and the report counts the one frame that was sent.
// r[verify gateway.drain.order]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_2_waits_for_every_connections_frame_counting_each_connection_once() {
    use futures_util::StreamExt;
    let mut c = short_cap("a", 1500);
    // Pushes are refused past the message size limit: room for the large ones below.
    c.max_message_size = 1024 * 1024;
    let node = start(c).await;
    let mut ann = member(&node.gateway, "ann", "talk").await;
    let bob = member(&node.gateway, "bob", "lobby").await;
    // Far more than the kernel's socket buffers hold: bob's close frame cannot be written.
    let big = "x".repeat(512 * 1024);
    for _ in 0..48 {
        node.gateway.push_room("lobby", &big).await;
    }
    // Ann reads on and answers the close (tungstenite replies to it), so she ends at once.
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = ann.next().await {} });
    let report = node.gateway.drain(StopReason::Restart, None).await;
    reader.await.unwrap();
    assert_eq!(report.connections, 2);
    assert_eq!(report.close_frames_sent, 1, "{report:?}");
    assert_eq!((report.closed_in_time, report.force_closed), (1, 1));
    assert_eq!(node.gateway.stats().slow_consumer_drops, 0);
    let order: Vec<Step> = report.steps.iter().map(|s| s.step).collect();
    assert_eq!(
        order,
        [
            Step::StopAccepting,
            Step::Close,
            Step::Handshake,
            Step::Routing
        ]
    );
    // Steps 1 and 2 together lasted until step 2's deadline (less the rounding of two
    // truncated milliseconds): bob never got his frame, so step 2 did not end early.
    let close = &report.steps[1];
    assert!(
        report.steps[0].took_ms + close.took_ms + 2 >= close.deadline_ms,
        "{report:?}"
    );
    drop(bob);
}

// r[verify gateway.drain.budget]
// r[verify gateway.drain.deregister]
// r[verify gateway.drain.signal]
// Every step runs and reports its problem even when the backends fail or hang.
// r[verify gateway.drain.order]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_that_hang_at_drain_time_do_not_keep_clients_or_overrun_the_cap() {
    for hang in [true, false] {
        let down = Arc::new(AtomicBool::new(false));
        let backend = Arc::new(DownBackend {
            hang,
            down: down.clone(),
            routing: MemoryRouting::new(),
            registry: MemoryRegistry::new(),
        });
        let gateway = start_backends(short_cap("a", 1000), backend.clone(), backend.clone()).await;
        let mut clients = Vec::new();
        for u in ["ann", "bob"] {
            let mut ws = member(&gateway, u, "lobby").await;
            clients.push(tokio::spawn(async move {
                read_to_end(&mut ws, Duration::from_secs(10)).await
            }));
        }
        down.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let result = gateway
            .stopper()
            .stop(StopRequest {
                deadline: started + Duration::from_secs(10),
                reason: StopReason::Restart,
            })
            .await;
        let took = started.elapsed();
        assert!(
            took <= Duration::from_millis(1000 + 150),
            "hang={hang}: {took:?}"
        );
        for c in clients {
            assert_eq!(u16::from(c.await.unwrap().close.unwrap().code), 1012);
        }
        let err = result.expect_err("the stopper reports what it could not clean up");
        assert!(err.0.contains("deregistration"), "{err}");
        assert!(err.0.contains("routing"), "{err}");
        let report = gateway.drain(StopReason::Restart, None).await;
        if hang {
            assert_eq!(report.deregistration, Cleanup::TimedOut);
            assert_eq!(report.routes.unfinished, 2);
        } else {
            assert!(matches!(report.deregistration, Cleanup::Failed(_)));
            assert_eq!(report.routes.failed, 2);
        }
    }
}

// r[verify gateway.drain.budget]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_deadline_shortens_the_cap() {
    let node = start(config("a")).await;
    let _silent = member(&node.gateway, "ann", "lobby").await;
    let started = Instant::now();
    let report = node
        .gateway
        .drain(
            StopReason::Restart,
            Some(started + Duration::from_millis(600)),
        )
        .await;
    assert!(started.elapsed() <= Duration::from_millis(600 + 150));
    assert!(report.cap_ms <= 600, "{report:?}");
    assert_eq!(report.force_closed, 1);
}

// r[verify gateway.drain.routing+2]
// r[verify gateway.routing.compare-and-delete+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_leaves_the_route_of_a_user_who_moved_to_another_replica() {
    let routing = MemoryRouting::new();
    let registry = MemoryRegistry::new();
    let a = start_with(short_cap("a", 1000), registry.clone(), routing.clone()).await;
    let b = start_with(short_cap("b", 1000), registry.clone(), routing.clone()).await;
    let _ann = member(&a.gateway, "ann", "lobby").await;
    let _bob_old = member(&a.gateway, "bob", "lobby").await;
    // Bob connects to b too before a drains.
    let _bob_new = member(&b.gateway, "bob", "lobby").await;
    assert_eq!(routing.get("bob"), ["a", "b"]);
    // Cat's, Dan's and Eve's entries for a are removed from outside (an operator, an expiry)
    // before a drains; Eve is connected to b too.
    let _cat = member(&a.gateway, "cat", "lobby").await;
    let _dan = member(&a.gateway, "dan", "lobby").await;
    let _eve = member(&a.gateway, "eve", "lobby").await;
    let _eve_b = member(&b.gateway, "eve", "lobby").await;
    for user in ["cat", "dan", "eve"] {
        assert_eq!(
            routing.compare_and_delete(user, "a").await,
            Ok(CasOutcome::Cleared)
        );
    }
    let report = a.gateway.drain(StopReason::Restart, None).await;
    // Every count the report prints, each distinct, so a miscounted outcome shows.
    assert_eq!(
        report.routes,
        RouteCleanup {
            cleared: 2,
            stale: 1,
            absent: 2,
            failed: 0,
            unfinished: 0,
        }
    );
    assert!(routing.get("ann").is_empty());
    assert_eq!(routing.get("bob"), ["b"], "b's route survives a's drain");
    assert_eq!(routing.get("eve"), ["b"]);
    assert_eq!(registry.replicas().len(), 1);
}

// The control arm: without the drain each point above fails, so the drain tests cannot pass
// vacuously.
// r[verify gateway.drain.order]
// r[verify gateway.drain.close+2]
// r[verify gateway.drain.routing+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_arm_without_drain_leaves_registration_routes_and_no_close_frame() {
    let node = start(config("a")).await;
    let mut ws = member(&node.gateway, "ann", "lobby").await;
    node.gateway.abandon();
    let end = read_to_end(&mut ws, Duration::from_secs(5)).await;
    assert!(end.close.is_none(), "no close frame without a drain");
    assert!(
        node.registry.is_registered("a"),
        "registration outlives the replica"
    );
    assert_eq!(node.routing.get("ann"), ["a"], "route left behind");
}
