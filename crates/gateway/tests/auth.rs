//! JWT authentication against a running gateway: key files re-read while it runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use holdfast_gateway::{AuthSettings, Signer, TokenKey};

// r[verify gateway.auth.key-reload]
#[tokio::test(start_paused = true)]
async fn a_rotated_key_file_is_picked_up_on_the_next_poll_and_a_broken_one_keeps_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, "first-secret-0123456789\n").unwrap();
    let key = TokenKey::from_files(vec![path.clone()], AuthSettings::default()).unwrap();
    let mut c = config("a");
    c.token_key = key.clone();
    c.key_reload_interval = Duration::from_secs(5);
    let node = start(c).await;
    let tok = |s: &str| {
        Signer::new(s.as_bytes())
            .token("ann", SystemTime::now() + Duration::from_secs(60))
            .unwrap()
    };
    let ok = |s: &str| key.verify(&tok(s), SystemTime::now()).is_ok();
    assert!(ok("first-secret-0123456789"));

    std::fs::write(&path, "second-secret-0123456789\n").unwrap();
    // Not before the poll.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(ok("first-secret-0123456789") && !ok("second-secret-0123456789"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(ok("second-secret-0123456789") && !ok("first-secret-0123456789"));
    assert_eq!(node.gateway.stats().key_reloads, 1);

    // A broken file: the previous keys stay, with a fault, counted once.
    std::fs::write(&path, "short").unwrap();
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(ok("second-secret-0123456789"));
    assert!(node.gateway.key_fault().is_some());
    assert_eq!(node.gateway.stats().key_reload_failures, 1);
    std::fs::write(&path, "third-secret-0123456789").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(ok("third-secret-0123456789"));
    assert!(node.gateway.key_fault().is_none());
    assert_eq!(node.gateway.stats().key_reloads, 2);
}
