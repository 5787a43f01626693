//! Watching replica A's registration in etcd: through etcd's JSON gateway (`/v3/kv/range`), so the
//! demo needs no etcd client of its own.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tokio::time::Instant;

use super::http;

/// The key a replica registers under (the gateway's layout: `PREFIX/replicas/ID`).
pub fn key(prefix: &str, replica: &str) -> String {
    format!("{}/replicas/{replica}", prefix.trim_end_matches('/'))
}

/// The body of a range request for exactly `key`.
fn range_body(key: &str) -> String {
    serde_json::json!({ "key": STANDARD.encode(key) }).to_string()
}

/// Whether a range answer holds a key (etcd leaves `kvs` out when nothing matched).
fn holds_key(answer: &serde_json::Value) -> bool {
    answer["kvs"].as_array().is_some_and(|kvs| !kvs.is_empty())
}

/// Whether `key` exists in the etcd at `addr`.
pub async fn present(addr: SocketAddr, key: &str) -> anyhow::Result<bool> {
    let (status, body) = http::tcp(addr, "POST", "/v3/kv/range", Some(&range_body(key))).await?;
    if status != 200 {
        bail!("etcd range {key}: {status} {body}");
    }
    let answer: serde_json::Value = serde_json::from_str(&body).context("parsing etcd's answer")?;
    Ok(holds_key(&answer))
}

/// Polls `key` from `since` until it is gone or `cap` has passed; returns when it was first seen
/// gone (`None`: still there) and how long it was watched.
pub async fn watch_until_gone(
    addr: SocketAddr,
    key: &str,
    since: Instant,
    cap: Duration,
) -> (Option<Duration>, Duration) {
    loop {
        // A failed poll (etcd busy) says nothing either way: poll again.
        if let Ok(false) = present(addr, key).await {
            let at = since.elapsed();
            return (Some(at), at);
        }
        if since.elapsed() >= cap {
            return (None, since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// etcd's `http://HOST:PORT` client URL as a socket address.
pub fn etcd_addr(url: &str) -> anyhow::Result<SocketAddr> {
    let hostport = url
        .strip_prefix("http://")
        .with_context(|| format!("etcd URL {url:?} is not http://"))?;
    hostport
        .trim_end_matches('/')
        .parse()
        .with_context(|| format!("etcd URL {url:?} is not http://IP:PORT"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_request_names_the_replicas_key() {
        assert_eq!(
            key("/holdfast/demo/", "gw-a"),
            "/holdfast/demo/replicas/gw-a"
        );
        let body: serde_json::Value = serde_json::from_str(&range_body("/p/replicas/a")).unwrap();
        assert_eq!(body["key"], STANDARD.encode("/p/replicas/a"));
        assert!(holds_key(
            &serde_json::json!({"kvs":[{"key":"eA=="}],"count":"1"})
        ));
        assert!(!holds_key(&serde_json::json!({"header":{}})));
        assert_eq!(
            etcd_addr("http://127.0.0.1:2379").unwrap(),
            "127.0.0.1:2379".parse().unwrap()
        );
        assert!(etcd_addr("https://x").is_err());
    }
}
