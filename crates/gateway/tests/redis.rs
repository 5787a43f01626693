//! The routing map on a real Redis (`cargo xtask test -- -p holdfast-gateway` starts one; without
//! it these tests skip loudly): the Lua compare-and-delete's three outcomes, entries that expire
//! with their replica, two replicas draining against one map, and Redis stalled at drain time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use holdfast_gateway::{CasOutcome, MemoryRegistry, RedisRouting, RoutingMap};
use holdfast_lifecycle::StopReason;
use holdfast_test_support::fault_proxy::{FaultProxy, Mode};
use holdfast_test_support::services;
use tokio::time::Instant;

fn prefix(test: &str) -> String {
    format!("holdfast-test:{}:{}:", test, std::process::id())
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

// r[verify gateway.routing.compare-and-delete+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lua_compare_and_delete_has_three_outcomes_on_redis() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("cas");
    let a = RedisRouting::new(&redis.url, &p, Duration::from_secs(2)).unwrap();
    let b = RedisRouting::new(&redis.url, &p, Duration::from_secs(2)).unwrap();
    a.set_route("ann", "a").await.unwrap();
    a.set_route("bob", "a").await.unwrap();
    // Bob is connected to b as well.
    b.set_route("bob", "b").await.unwrap();
    assert_eq!(a.routes("bob").await, Ok(strings(&["a", "b"])));
    assert_eq!(
        a.compare_and_delete("ann", "a").await,
        Ok(CasOutcome::Cleared)
    );
    assert_eq!(a.routes("ann").await, Ok(vec![]));
    assert_eq!(
        a.compare_and_delete("bob", "a").await,
        Ok(CasOutcome::Cleared)
    );
    assert_eq!(
        a.routes("bob").await,
        Ok(strings(&["b"])),
        "b's entry survives"
    );
    assert_eq!(
        a.compare_and_delete("bob", "a").await,
        Ok(CasOutcome::Stale)
    );
    assert_eq!(
        a.compare_and_delete("cat", "a").await,
        Ok(CasOutcome::Absent)
    );
    assert_eq!(
        b.compare_and_delete("bob", "b").await,
        Ok(CasOutcome::Cleared)
    );
    assert_eq!(b.routes("bob").await, Ok(vec![]));
}

// r[verify gateway.cluster.dead-route+2]
/// The delete of an entry at the version read purges expired members first, as the
/// compare-and-delete does: an entry that expired since the read is no longer there to delete
/// (stale, the user's other entry remaining), whatever its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_that_expired_is_not_deleted_as_the_entry_read() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("expired-entry");
    let a = RedisRouting::new(&redis.url, &p, Duration::from_secs(2)).unwrap();
    a.set_route("ann", "b").await.unwrap();
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    // Replica x's entry, expired a second ago but still in the set (the key lives on with b's).
    let expired = secs * 1000 + micros / 1000 - 1000;
    let _: i64 = redis::cmd("ZADD")
        .arg(format!("{p}route:ann"))
        .arg(expired)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        a.delete_entry("ann", "x", expired).await,
        Ok(CasOutcome::Stale)
    );
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{p}route:ann"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(members, ["b"], "the expired member is purged");
    assert_eq!(
        a.compare_and_delete("ann", "b").await,
        Ok(CasOutcome::Cleared)
    );
}

// r[verify gateway.cluster.dead-route+2]
/// An add in the same ms of the Redis clock as the add that was read (the deadline alone would be
/// equal) still writes a later version: the delete of the entry read leaves it, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_added_again_in_the_same_ms_survives_the_delete_of_the_entry_read() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("samems");
    let a = RedisRouting::new(&redis.url, &p, Duration::from_secs(2)).unwrap();
    let mut deleted = 0;
    for i in 0..200 {
        let user = format!("u{i}");
        a.set_route(&user, "x").await.unwrap();
        let read = a.route_entries(&user).await.unwrap();
        a.set_route(&user, "x").await.unwrap();
        if a.delete_entry(&user, "x", read[0].1).await.unwrap() == CasOutcome::Cleared {
            deleted += 1;
        }
        assert_eq!(a.routes(&user).await, Ok(strings(&["x"])), "{user}");
        a.compare_and_delete(&user, "x").await.unwrap();
    }
    assert_eq!(
        deleted, 0,
        "re-added entries deleted by the delete of the entry read"
    );
}

// r[verify gateway.cluster.dead-route+2]
/// The Lua delete of an entry at the version read: an entry added again since (a later
/// deadline) stays; the entry as read goes; a legacy string route is version 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_added_again_after_the_read_survives_the_delete_of_the_entry_read() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("entry");
    let a = RedisRouting::new(&redis.url, &p, Duration::from_secs(2)).unwrap();
    a.set_route("ann", "a").await.unwrap();
    a.set_route("ann", "b").await.unwrap();
    let read = a.route_entries("ann").await.unwrap();
    assert_eq!(
        read.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(read.iter().all(|(_, v)| *v > 0), "{read:?}");
    a.set_route("ann", "b").await.unwrap();
    assert_eq!(
        a.delete_entry("ann", "b", read[1].1).await,
        Ok(CasOutcome::Stale)
    );
    assert_eq!(a.routes("ann").await, Ok(strings(&["a", "b"])));
    assert_eq!(
        a.delete_entry("ann", "a", read[0].1).await,
        Ok(CasOutcome::Cleared)
    );
    let now = a.route_entries("ann").await.unwrap();
    assert_eq!(now.len(), 1);
    assert_eq!(
        a.delete_entry("ann", "b", now[0].1).await,
        Ok(CasOutcome::Cleared)
    );
    assert_eq!(
        a.delete_entry("ann", "b", now[0].1).await,
        Ok(CasOutcome::Absent)
    );
    // A route written before the per-user sets: a plain string, version 0.
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{p}route:old");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("c")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(a.route_entries("old").await, Ok(vec![("c".to_owned(), 0)]));
    assert_eq!(a.delete_entry("old", "c", 0).await, Ok(CasOutcome::Cleared));
}

// r[verify gateway.routing.expiry]
/// A replica's entries live while its map refreshes them and go within the TTL once it stops
/// (the process died): a dead replica is not routed to for longer than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_routes_expire_and_a_live_ones_are_refreshed() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("expiry");
    let ttl = Duration::from_millis(600);
    let live = RedisRouting::with_ttl(&redis.url, &p, Duration::from_secs(2), ttl).unwrap();
    let dead = RedisRouting::with_ttl(&redis.url, &p, Duration::from_secs(2), ttl).unwrap();
    live.set_route("ann", "a").await.unwrap();
    dead.set_route("ann", "b").await.unwrap();
    dead.set_route("bob", "b").await.unwrap();
    assert_eq!(live.routes("ann").await, Ok(strings(&["a", "b"])));
    // b's process dies: nothing refreshes its entries any more.
    drop(dead);
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(
        live.routes("ann").await,
        Ok(strings(&["a"])),
        "a was refreshed"
    );
    assert_eq!(live.routes("bob").await, Ok(vec![]), "b's entries expired");
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(format!("{p}route:bob"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0, "the key of a user nobody holds is gone");
    // An entry lost on the server (a flush, a restart) comes back at the next refresh.
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{p}route:ann"))
        .query_async(&mut c)
        .await
        .unwrap();
    tokio::time::sleep(ttl).await;
    assert_eq!(live.routes("ann").await, Ok(strings(&["a"])));
    assert_eq!(
        live.compare_and_delete("ann", "a").await,
        Ok(CasOutcome::Cleared)
    );
    tokio::time::sleep(ttl).await;
    assert_eq!(
        live.routes("ann").await,
        Ok(vec![]),
        "a deleted entry is not refreshed"
    );
}

// r[verify gateway.drain.routing+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_map_drain_without_deleting_each_others_routes() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("drain");
    let routing = RedisRouting::new(&redis.url, &p, Duration::from_secs(2)).unwrap();
    let registry = MemoryRegistry::new();
    let a = start_backends(
        config("a"),
        Arc::new(registry.clone()),
        Arc::new(routing.clone()),
    )
    .await;
    let b = start_backends(
        config("b"),
        Arc::new(registry.clone()),
        Arc::new(routing.clone()),
    )
    .await;
    let _ann = member(&a, "ann", "lobby").await;
    let _bob_a = member(&a, "bob", "lobby").await;
    let _bob_b = member(&b, "bob", "lobby").await;
    assert_eq!(routing.routes("bob").await, Ok(strings(&["a", "b"])));
    let report = a.drain(StopReason::Restart, None).await;
    assert_eq!(
        (report.routes.cleared, report.routes.stale),
        (2, 0),
        "{report:?}"
    );
    assert_eq!(routing.routes("ann").await, Ok(vec![]));
    assert_eq!(routing.routes("bob").await, Ok(strings(&["b"])));
    b.drain(StopReason::Restart, None).await;
    assert_eq!(routing.routes("bob").await, Ok(vec![]));
}

// r[verify gateway.drain.budget]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stalled_at_drain_time_still_closes_clients_inside_the_cap() {
    let Some(redis) = services::redis() else {
        return;
    };
    let proxy = FaultProxy::start(redis.addr).await.unwrap();
    let url = format!("redis://{}", proxy.addr());
    let routing = RedisRouting::new(&url, &prefix("stall"), Duration::from_secs(30)).unwrap();
    let mut c = config("a");
    c.drain.total = Duration::from_millis(1000);
    let a = start_backends(
        c,
        Arc::new(MemoryRegistry::new()),
        Arc::new(routing.clone()),
    )
    .await;
    let mut ws = member(&a, "ann", "lobby").await;
    let reader = tokio::spawn(async move { read_to_end(&mut ws, Duration::from_secs(10)).await });
    // Redis hangs: the live connection freezes, and new ones are never answered.
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
    // Unanswered at the deadline, or failed by the client's own response timeout: either way
    // not cleared, and reported.
    assert_eq!(
        report.routes.unfinished + report.routes.failed,
        1,
        "{report:?}"
    );
    assert_eq!(report.routes.cleared, 0);
    assert!(report.problems.iter().any(|p| p.contains("routing")));
}

// r[verify gateway.routing.expiry]
/// A refresh round with Redis stalled (three batches of users, each waiting out the call
/// timeout) does not hold up a login's add or a connection's delete: each answers within its own
/// timeout, not the round's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_round_with_redis_stalled_does_not_hold_up_adds_or_deletes() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("refresh-stall");
    let proxy = FaultProxy::start(redis.addr).await.unwrap();
    let via = format!("redis://{}", proxy.addr());
    let timeout = Duration::from_secs(1);
    let m = RedisRouting::with_ttl(&via, &p, timeout, Duration::from_millis(600)).unwrap();
    for i in 0..1500 {
        m.set_route(&format!("u{i}"), "a").await.unwrap();
    }
    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    // A round (every 200 ms) has started and waits on its first of three batches.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let added = m.set_route("new", "a").await;
    let add_took = t.elapsed();
    let t = Instant::now();
    let deleted = m.compare_and_delete("u1", "a").await;
    let delete_took = t.elapsed();
    proxy.set_mode(Mode::Forward).await.unwrap();
    assert!(added.is_err() && deleted.is_err(), "{added:?} {deleted:?}");
    let bound = timeout + Duration::from_millis(500);
    assert!(add_took < bound, "set_route waited {add_took:?}");
    assert!(
        delete_took < bound,
        "compare_and_delete waited {delete_took:?}"
    );
}

// r[verify gateway.routing.expiry]
/// Users released while refresh rounds run (a round reads what to refresh, then writes it): a
/// round that read a user before its delete may put it back once, but it expires within the TTL
/// and no later round refreshes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_released_during_refresh_rounds_are_gone_within_the_ttl() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("refresh-race");
    let ttl = Duration::from_millis(600);
    let m = RedisRouting::with_ttl(&redis.url, &p, Duration::from_secs(2), ttl).unwrap();
    let users: Vec<String> = (0..2000).map(|i| format!("u{i}")).collect();
    for u in &users {
        m.set_route(u, "a").await.unwrap();
    }
    m.set_route("kept", "a").await.unwrap();
    // Deleted while rounds (every 200 ms, four batches each) run.
    for u in &users {
        m.compare_and_delete(u, "a").await.unwrap();
    }
    tokio::time::sleep(ttl * 2).await;
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    for u in &users {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(format!("{p}route:{u}"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(exists, 0, "{u} still routed two TTLs after its delete");
    }
    assert_eq!(m.routes("kept").await, Ok(strings(&["a"])));
}

// r[verify gateway.routing.expiry]
/// Replicas with different TTLs share a user's key: the short one's add or refresh never
/// shortens the key below the long one's member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_ttl_member_does_not_expire_a_long_ttl_members_key() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("mixed-ttl");
    let long = RedisRouting::with_ttl(
        &redis.url,
        &p,
        Duration::from_secs(2),
        Duration::from_secs(30),
    )
    .unwrap();
    let short = RedisRouting::with_ttl(
        &redis.url,
        &p,
        Duration::from_secs(2),
        Duration::from_millis(300),
    )
    .unwrap();
    long.set_route("ann", "a").await.unwrap();
    short.set_route("ann", "b").await.unwrap();
    // b dies: its member expires, a's stays.
    drop(short);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(long.routes("ann").await, Ok(strings(&["a"])));
}

// r[verify gateway.drain.routing+2]
/// A user whose route could not be written at login (Redis blipped) is still this replica's to
/// delete: the map's refresher writes it later, so the drain deletes it and the drained replica
/// is not routed to afterwards (the node keeps the drained gateway, and its map, for its report).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_that_failed_at_login_is_deleted_by_the_drain() {
    let Some(redis) = services::redis() else {
        return;
    };
    let p = prefix("drain-unwritten");
    let proxy = FaultProxy::start(redis.addr).await.unwrap();
    let via = format!("redis://{}", proxy.addr());
    let ttl = Duration::from_millis(600);
    let routing = RedisRouting::with_ttl(&via, &p, Duration::from_secs(1), ttl).unwrap();
    let a = start_backends(
        config("a"),
        Arc::new(MemoryRegistry::new()),
        Arc::new(routing.clone()),
    )
    .await;
    let _warm = member(&a, "warm", "lobby").await;
    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    let _ann = member(&a, "ann", "lobby").await;
    proxy.set_mode(Mode::Forward).await.unwrap();
    let report = a.drain(StopReason::Restart, None).await;
    assert_eq!(
        report.routes.failed + report.routes.unfinished,
        0,
        "{report:?}"
    );
    tokio::time::sleep(ttl * 3).await;
    let direct = RedisRouting::new(&redis.url, &p, Duration::from_secs(2)).unwrap();
    assert_eq!(direct.routes("ann").await, Ok(vec![]), "{report:?}");
    assert_eq!(direct.routes("warm").await, Ok(vec![]), "{report:?}");
    drop(a);
}
