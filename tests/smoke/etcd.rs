//! Smoke test: put and get a key in etcd through its v3 JSON gateway.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step should panic.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use holdfast_e2e::{Target, http_request};
use holdfast_test_support::services;

// i[verify harness.services.etcd]
// i[verify harness.services.ready]
#[tokio::test]
async fn etcd_stores_and_returns_a_key() {
    let Some(etcd) = services::etcd() else { return };
    let target = Target::parse(&etcd.url).unwrap();
    let key = format!("holdfast/smoke/{}", std::process::id());
    let value = "written by the smoke test";

    let put = serde_json::json!({ "key": B64.encode(&key), "value": B64.encode(value) });
    let response = http_request(
        &target,
        "POST",
        "/v3/kv/put",
        &[],
        Some(put.to_string()),
        None,
    )
    .await
    .unwrap();
    assert_eq!(response.status, 200, "{:?}", response.body);

    let range = serde_json::json!({ "key": B64.encode(&key) });
    let response = http_request(
        &target,
        "POST",
        "/v3/kv/range",
        &[],
        Some(range.to_string()),
        None,
    )
    .await
    .unwrap();
    assert_eq!(response.status, 200);
    let reply: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    let stored = reply["kvs"][0]["value"].as_str().unwrap();
    assert_eq!(B64.decode(stored).unwrap(), value.as_bytes());
}
