//! Smoke test: SET and GET in Redis.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step should panic.

use holdfast_e2e::resp_command;
use holdfast_test_support::services;
use tokio::io::BufReader;
use tokio::net::TcpStream;

// i[verify harness.services.redis]
// i[verify harness.services.ready]
#[tokio::test]
async fn redis_sets_and_gets_a_key() {
    let Some(redis) = services::redis() else {
        return;
    };
    let mut stream = BufReader::new(TcpStream::connect(redis.addr).await.unwrap());
    let key = format!("holdfast:smoke:{}", std::process::id());

    let set = resp_command(&mut stream, &[b"SET", key.as_bytes(), b"hello"]).await;
    assert_eq!(set.unwrap(), "+OK");
    let get = resp_command(&mut stream, &[b"GET", key.as_bytes()]).await;
    assert_eq!(get.unwrap(), "hello");
    let missing = resp_command(&mut stream, &[b"GET", b"holdfast:smoke:never-set"]).await;
    assert_eq!(missing.unwrap(), "(nil)");
}
