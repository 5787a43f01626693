//! Module health on a watch channel.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use holdfast_lifecycle::{Health, health_channel};
use tokio::time::timeout;

// r[verify lifecycle.health]
#[tokio::test(start_paused = true)]
async fn health_starts_as_starting_and_each_change_is_seen() {
    let (reporter, mut watch) = health_channel();
    assert_eq!(watch.get(), Health::Starting);
    reporter.set(Health::Ready);
    assert_eq!(watch.get(), Health::Ready);
    assert_eq!(watch.changed().await, Some(Health::Ready));
    let writer = reporter.clone();
    writer.set(Health::Degraded("etcd unreachable".into()));
    assert_eq!(
        watch.changed().await,
        Some(Health::Degraded("etcd unreachable".into()))
    );
}

// r[verify lifecycle.health]
#[tokio::test(start_paused = true)]
async fn setting_the_same_health_wakes_no_watcher() {
    let (reporter, mut watch) = health_channel();
    reporter.set(Health::Ready);
    assert_eq!(watch.changed().await, Some(Health::Ready));
    reporter.set(Health::Ready);
    let waited = timeout(Duration::from_secs(60), watch.changed()).await;
    assert!(waited.is_err(), "no change, no wake-up: {waited:?}");
    drop(reporter);
}

// r[verify lifecycle.health]
#[tokio::test(start_paused = true)]
async fn waiting_ends_once_the_reporter_is_gone_and_its_last_value_was_seen() {
    let (reporter, mut watch) = health_channel();
    let clone = reporter.clone();
    reporter.set(Health::Stopped);
    drop(reporter);
    drop(clone);
    assert_eq!(
        watch.changed().await,
        Some(Health::Stopped),
        "the last value is not lost"
    );
    let ended = timeout(Duration::from_secs(60), watch.changed()).await;
    assert_eq!(ended, Ok(None));
    assert_eq!(watch.get(), Health::Stopped);
}

#[test]
fn health_serialises_with_its_reason() {
    let json = serde_json::to_value(Health::Degraded("no docker".into())).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"state": "degraded", "reason": "no docker"})
    );
    assert_eq!(
        serde_json::to_value(Health::Ready).unwrap(),
        serde_json::json!({"state": "ready"})
    );
}

// r[verify lifecycle.health]
#[tokio::test(start_paused = true)]
async fn a_blip_back_to_the_value_last_seen_wakes_no_watcher() {
    let (reporter, mut watch) = health_channel();
    reporter.set(Health::Ready);
    assert_eq!(watch.changed().await, Some(Health::Ready));
    // Degraded and back before the node looked: what it last saw is what it is.
    reporter.set(Health::Degraded("redis reconnecting".into()));
    reporter.set(Health::Ready);
    let waited = timeout(Duration::from_secs(60), watch.changed()).await;
    assert!(waited.is_err(), "no difference, no wake-up: {waited:?}");
    reporter.set(Health::Draining);
    assert_eq!(watch.changed().await, Some(Health::Draining));
    // Gone after a last value equal to the one seen: waiting ends.
    reporter.set(Health::Ready);
    reporter.set(Health::Draining);
    drop(reporter);
    assert_eq!(
        timeout(Duration::from_secs(60), watch.changed()).await,
        Ok(None)
    );
}
