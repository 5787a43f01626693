//! The service registry on a real etcd (feature `etcd`; `cargo xtask test -- -p
//! holdfast-gateway` builds with it and starts etcd; without etcd these tests skip loudly): the
//! lease, its keep-alive and replacement, its revocation before the first close frame, and etcd
//! down at start and at drain.
#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use holdfast_gateway::{
    Cleanup, Cluster, EtcdConfig, EtcdRegistry, Gateway, GatewayConfig, MemoryBus, MemoryRouting,
    Replica, ServiceRegistry,
};
use holdfast_lifecycle::StopReason;
use holdfast_test_support::fault_proxy::{FaultProxy, Mode};
use holdfast_test_support::services;
use tokio::time::Instant;

fn prefix(test: &str) -> String {
    format!("/holdfast-test/{}/{}", test, std::process::id())
}

fn etcd_config(url: &str, prefix: &str, ttl_secs: u64) -> EtcdConfig {
    EtcdConfig {
        endpoints: vec![url.to_owned()],
        prefix: prefix.to_owned(),
        lease_ttl: Duration::from_secs(ttl_secs),
        timeout: Duration::from_millis(500),
        seed: 1,
    }
}

fn addr(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

async fn start_on(config: GatewayConfig, registry: &EtcdRegistry) -> Gateway {
    let cluster = Cluster {
        registry: Arc::new(registry.clone()),
        routing: Arc::new(MemoryRouting::new()),
        bus: Arc::new(MemoryBus::new()),
        seed: Some(1),
        history: None,
    };
    Gateway::start_cluster(config, cluster).await.unwrap()
}

/// What etcd holds under `key`: the value and its lease.
async fn read(url: &str, key: &str) -> Option<(Replica, i64)> {
    let mut client = etcd_client::Client::connect([url], None).await.unwrap();
    let resp = client.get(key, None).await.unwrap();
    let kv = resp.kvs().first()?;
    Some((serde_json::from_slice(kv.value()).unwrap(), kv.lease()))
}

async fn eventually_async<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within {limit:?}: {what}");
}

// r[verify gateway.cluster.lease]
// r[verify gateway.cluster.keepalive+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registration_is_a_key_on_a_lease_kept_alive_and_replaced_when_lost() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let p = prefix("lease");
    let registry = EtcdRegistry::connect(etcd_config(&etcd.url, &p, 2))
        .await
        .unwrap();
    let a = start_on(config("a"), &registry).await;
    assert!(a.is_ready());
    let key = registry.key("a");
    assert_eq!(key, format!("{p}/replicas/a"));
    let (replica, lease) = read(&etcd.url, &key).await.expect("registered");
    assert_eq!(&replica, a.replica());
    assert_ne!(lease, 0, "attached to a lease");
    assert_eq!(Some(lease), registry.lease_id());

    // Three TTLs later the key is still there, on the same lease: it is kept alive.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(read(&etcd.url, &key).await.map(|r| r.1), Some(lease));
    assert!(a.is_ready());

    // The lease is revoked behind the replica's back: it registers again on a new one.
    let mut admin = etcd_client::Client::connect([etcd.url.as_str()], None)
        .await
        .unwrap();
    admin.lease_revoke(lease).await.unwrap();
    assert_eq!(read(&etcd.url, &key).await, None);
    eventually_async("registered again", Duration::from_secs(10), || async {
        read(&etcd.url, &key)
            .await
            .is_some_and(|(_, l)| l != 0 && l != lease)
    })
    .await;
    assert!(registry.lease_stats().leases_lost >= 1);
    assert!(
        a.cluster_health().registry.registrations >= 2,
        "seen through the gateway"
    );
    eventually("ready again", || a.is_ready()).await;
    a.drain(StopReason::Shutdown, None).await;
    assert_eq!(read(&etcd.url, &key).await, None);
}

// r[verify gateway.cluster.keepalive+2]
// r[verify gateway.cluster.ready]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_outage_keeps_the_replica_ready_for_a_ttl_then_its_lease_is_replaced() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let proxy = FaultProxy::start(addr(&etcd.url)).await.unwrap();
    let p = prefix("outage");
    let via = format!("http://{}", proxy.addr());
    let ttl = Duration::from_secs(4);
    let registry = EtcdRegistry::connect(etcd_config(&via, &p, ttl.as_secs()))
        .await
        .unwrap();
    let a = start_on(config("a"), &registry).await;
    let key = registry.key("a");
    let (_, lease) = read(&etcd.url, &key).await.expect("registered");
    assert!(a.is_ready());

    // etcd becomes unreachable: every connection to it is reset.
    proxy.set_mode(Mode::Reset).await.unwrap();
    let cut = Instant::now();
    eventually_async("a keep-alive failure", Duration::from_secs(5), || async {
        registry.lease_stats().keepalive_transient >= 1
    })
    .await;
    // The failure is counted, and the replica stays ready: the lease may still be alive (the
    // first refresh after the cut comes within a third of the TTL, far inside the TTL).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(cut.elapsed() < ttl / 2, "checked inside the TTL");
    assert!(a.is_ready(), "one failed keep-alive does not end readiness");
    assert_eq!(registry.lease_stats().leases_lost, 0);

    // A whole TTL without a confirmation: the lease is taken as gone, not ready.
    eventually_async(
        "not ready past the TTL",
        Duration::from_secs(10),
        || async { !a.is_ready() },
    )
    .await;
    // The last confirmation came at most a third of the TTL before the cut, and readiness ends
    // one TTL after it, whatever the keeper is waiting on (the margin is the polling).
    let unready = cut.elapsed();
    assert!(unready >= ttl - ttl / 3, "{unready:?}");
    assert!(unready < ttl + Duration::from_millis(300), "{unready:?}");

    // etcd is back after the lease expired there: it is counted lost and replaced.
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.set_mode(Mode::Forward).await.unwrap();
    eventually_async("ready again", Duration::from_secs(15), || async {
        a.is_ready()
    })
    .await;
    assert_eq!(registry.lease_stats().leases_lost, 1);
    let (_, renewed) = read(&etcd.url, &key).await.expect("registered again");
    assert_ne!(renewed, lease, "on a new lease");
    assert_eq!(Some(renewed), registry.lease_id());
    a.drain(StopReason::Shutdown, None).await;
}

// A lease was granted but the key could not be put on it (etcd refuses a value over its request
// limit): the registration failed, the registry holds no lease and is not live, so nothing keeps
// a keyless lease alive or calls the replica ready.
// r[verify gateway.cluster.lease]
// r[verify gateway.cluster.ready]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_key_could_not_be_put_is_not_held() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let p = prefix("unput");
    let registry = EtcdRegistry::connect(etcd_config(&etcd.url, &p, 5))
        .await
        .unwrap();
    let replica = Replica {
        id: "big".into(),
        address: "x".repeat(3 << 20),
    };
    let registered = registry.register(&replica).await;
    assert!(registered.is_err(), "{registered:?}");
    assert_eq!(registry.lease_id(), None);
    assert!(!registry.is_live());
    assert_eq!(registry.lease_stats().registrations, 0);
}

// r[verify gateway.cluster.lease]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_dies_without_draining_disappears_within_one_ttl() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let p = prefix("abandon");
    let registry = EtcdRegistry::connect(etcd_config(&etcd.url, &p, 2))
        .await
        .unwrap();
    let a = start_on(config("a"), &registry).await;
    let key = registry.key("a");
    a.abandon();
    let abandoned = Instant::now();
    // Nothing revoked it: the key is still there at first (the control arm of the drain)...
    assert!(read(&etcd.url, &key).await.is_some());
    // ...and gone once the lease, no longer kept alive, expires.
    eventually_async("the lease expires", Duration::from_secs(10), || async {
        read(&etcd.url, &key).await.is_none()
    })
    .await;
    assert!(
        abandoned.elapsed() >= Duration::from_secs(1),
        "expired, not revoked"
    );
}

// r[verify gateway.cluster.revoke]
// r[verify gateway.drain.deregister]
// r[verify gateway.drain.order]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_gone_before_any_client_sees_its_close_frame() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let p = prefix("drain");
    // A long TTL: only the revocation can remove the key in time.
    let registry = EtcdRegistry::connect(etcd_config(&etcd.url, &p, 60))
        .await
        .unwrap();
    let a = start_on(config("a"), &registry).await;
    let key = registry.key("a");
    assert!(read(&etcd.url, &key).await.is_some());
    let mut readers = Vec::new();
    for u in ["ann", "bob", "cat"] {
        let mut ws = member(&a, u, "lobby").await;
        let url = etcd.url.clone();
        let key = key.clone();
        readers.push(tokio::spawn(async move {
            let end = read_to_end(&mut ws, Duration::from_secs(10)).await;
            // Looked up once the close frame has arrived.
            (end.close.map(|c| u16::from(c.code)), read(&url, &key).await)
        }));
    }
    let report = a.drain(StopReason::Restart, None).await;
    assert_eq!(report.deregistration, Cleanup::Done, "{report:?}");
    for r in readers {
        let (code, registration) = r.await.unwrap();
        assert_eq!(code, Some(1012));
        assert_eq!(registration, None, "deregistered before the close frame");
    }
    assert_eq!(registry.lease_id(), None);
}

// r[verify gateway.cluster.register]
// r[verify gateway.cluster.ready]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_at_start_delays_readiness_until_it_is_back() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let proxy = FaultProxy::start(addr(&etcd.url)).await.unwrap();
    proxy.set_mode(Mode::Refuse).await.unwrap();
    let p = prefix("start");
    let via = format!("http://{}", proxy.addr());
    let registry = EtcdRegistry::connect(etcd_config(&via, &p, 5))
        .await
        .unwrap();
    let started = Instant::now();
    let a = start_on(config("a"), &registry).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "start is not held up"
    );
    assert!(!a.is_ready());
    let mut ann = member(&a, "ann", "lobby").await;
    a.push_room("lobby", "served").await;
    assert_eq!(next_text(&mut ann).await, "served");

    proxy.set_mode(Mode::Forward).await.unwrap();
    eventually_async(
        "ready once etcd is back",
        Duration::from_secs(15),
        || async { a.is_ready() },
    )
    .await;
    assert!(read(&etcd.url, &registry.key("a")).await.is_some());
    assert!(a.cluster_health().registration_failures >= 1);
    a.drain(StopReason::Shutdown, None).await;
}

// r[verify gateway.drain.budget]
// r[verify gateway.cluster.revoke]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_at_drain_still_closes_clients_inside_the_cap_and_reports_it() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let proxy = FaultProxy::start(addr(&etcd.url)).await.unwrap();
    let p = prefix("down");
    let via = format!("http://{}", proxy.addr());
    let registry = EtcdRegistry::connect(etcd_config(&via, &p, 3))
        .await
        .unwrap();
    let mut c = config("a");
    c.drain.total = Duration::from_millis(1000);
    let a = start_on(c, &registry).await;
    let key = registry.key("a");
    assert!(read(&etcd.url, &key).await.is_some());
    let mut ws = member(&a, "ann", "lobby").await;
    let reader = tokio::spawn(async move { read_to_end(&mut ws, Duration::from_secs(10)).await });
    // etcd hangs: the open channel freezes and new connections are never answered.
    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    let started = Instant::now();
    let report = a.drain(StopReason::Restart, None).await;
    assert!(
        started.elapsed() <= Duration::from_millis(1000 + 150),
        "{report:?}"
    );
    assert_eq!(u16::from(reader.await.unwrap().close.unwrap().code), 1012);
    assert_ne!(report.deregistration, Cleanup::Done, "{report:?}");
    assert!(
        report.problems.iter().any(|p| p.contains("deregistration")),
        "{report:?}"
    );
    // Not revoked: the key outlives the drain, but no longer than its lease.
    assert!(read(&etcd.url, &key).await.is_some());
    eventually_async("the lease expires", Duration::from_secs(10), || async {
        read(&etcd.url, &key).await.is_none()
    })
    .await;
}

// r[verify gateway.cluster.dead-route+2]
/// What a sender asks before it calls a replica dead: whether etcd still lists it. A replica
/// that registered is listed; once its lease is gone (revoked here, as its drain does, or
/// expired after a kill) it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_lists_a_replica_while_its_lease_holds() {
    let Some(etcd) = services::etcd() else {
        return;
    };
    let p = prefix("lists");
    let registry = EtcdRegistry::connect(etcd_config(&etcd.url, &p, 5))
        .await
        .unwrap();
    let a = start_on(config("a"), &registry).await;
    assert!(a.is_ready());
    let other = EtcdRegistry::connect(etcd_config(&etcd.url, &p, 5))
        .await
        .unwrap();
    assert_eq!(other.lists("a").await.unwrap(), Some(true));
    assert_eq!(other.lists("nobody").await.unwrap(), Some(false));
    a.drain(StopReason::Shutdown, None).await;
    assert_eq!(other.lists("a").await.unwrap(), Some(false));
}
