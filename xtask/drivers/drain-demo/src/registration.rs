//! Watching replica A's registration in etcd: through etcd's JSON gateway (`/v3/watch`, with
//! `/v3/kv/range` polls as the fallback), so the demo needs no etcd client of its own. A watch
//! reports the delete as etcd commits it, so its time can be compared with the clients' first close
//! frame; a poll is only an upper bound (its interval plus a request).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
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

/// An established watch on one key (etcd has answered `created`).
pub struct Watch {
    stream: TcpStream,
    /// What arrived after the `created` answer (watch events are JSON objects, one per line).
    events: Vec<u8>,
}

/// The body of a watch request for exactly `key`.
fn watch_body(key: &str) -> String {
    serde_json::json!({ "create_request": { "key": STANDARD.encode(key) } }).to_string()
}

/// Whether the watch stream so far says the watch was created; returns the bytes after that
/// answer's line.
fn after_created(stream: &[u8]) -> Option<&[u8]> {
    let text = std::str::from_utf8(stream).ok()?;
    let at = text.find("\"created\":true")?;
    let end = text[at..].find('\n')? + at + 1;
    Some(&stream[end..])
}

/// Whether watch events hold a delete (a revoked or expired lease deletes its key).
fn holds_delete(events: &[u8]) -> bool {
    String::from_utf8_lossy(events).contains("\"type\":\"DELETE\"")
}

/// Starts a watch on `key` (HTTP/1.0: etcd streams the events and closes at the end).
pub async fn watch(addr: SocketAddr, key: &str) -> anyhow::Result<Watch> {
    let body = watch_body(key);
    let request = format!(
        "POST /v3/watch HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let work = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                bail!("etcd ended the watch on {key} before creating it");
            }
            seen.extend_from_slice(&buf[..n]);
            if let Some(rest) = after_created(&seen) {
                let events = rest.to_vec();
                return Ok(Watch { stream, events });
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .with_context(|| format!("etcd did not create a watch on {key} in time"))?
}

impl Watch {
    /// Reads events from `since` until the key's delete arrives (its time) or `cap` has passed or
    /// the stream ended (`None`); the second value is how long it watched. It blocks: it runs on a
    /// thread of its own, so the delete is timed when it arrives, not when a runtime busy with a
    /// thousand clients' close frames gets round to it (which made it look later than the closes).
    fn deleted(self, since: Instant, cap: Duration) -> (Option<Duration>, Duration) {
        use std::io::Read as _;
        let since = since.into_std();
        let mut events = self.events;
        let Ok(mut stream) = self.stream.into_std() else {
            return (None, since.elapsed());
        };
        if stream.set_nonblocking(false).is_err() {
            return (None, since.elapsed());
        }
        let mut buf = [0u8; 4096];
        loop {
            if holds_delete(&events) {
                let at = since.elapsed();
                return (Some(at), at);
            }
            let left = cap.saturating_sub(since.elapsed());
            if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
                return (None, since.elapsed());
            }
            match stream.read(&mut buf) {
                Ok(n) if n > 0 => events.extend_from_slice(&buf[..n]),
                _ => return (None, since.elapsed()),
            }
        }
    }
}

/// Watches `key` from `since` for at most `cap`: through `watch` when there is one, polling when
/// it failed or ended early; returns when the key was seen gone and how long it was watched.
pub async fn until_gone(
    addr: SocketAddr,
    key: &str,
    watch: Option<Watch>,
    since: Instant,
    cap: Duration,
) -> (Option<Duration>, Duration) {
    if let Some(watch) = watch
        && let Ok((gone, watched)) =
            tokio::task::spawn_blocking(move || watch.deleted(since, cap)).await
        && (gone.is_some() || watched >= cap)
    {
        return (gone, watched);
    }
    watch_until_gone(addr, key, since, cap).await
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

    #[test]
    fn a_watch_sees_its_creation_then_the_delete() {
        let body: serde_json::Value = serde_json::from_str(&watch_body("/p/replicas/a")).unwrap();
        assert_eq!(
            body["create_request"]["key"],
            STANDARD.encode("/p/replicas/a")
        );
        let head = b"HTTP/1.0 200 OK\r\n\r\n";
        assert_eq!(after_created(head), None);
        let created = [
            &head[..],
            br#"{"result":{"header":{"revision":"2"},"created":true}}"#,
            b"\n",
        ]
        .concat();
        assert_eq!(after_created(&created), Some(&b""[..]));
        let delete = br#"{"result":{"events":[{"type":"DELETE","kv":{"key":"eA=="}}]}}"#;
        let both = [&created[..], &delete[..]].concat();
        let rest = after_created(&both).unwrap();
        assert!(holds_delete(rest));
        assert!(!holds_delete(
            br#"{"result":{"events":[{"kv":{"key":"eA=="}}]}}"#
        ));
    }
}
