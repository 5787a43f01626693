//! A client no one here wrote: Python's `websockets` (Debian python3-websockets) against a running
//! gateway — auth with a JWT, join, receive a push, and the close code of a drain. Without a
//! Python that imports `websockets` the test skips loudly (and fails under the harness, which
//! installs it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use holdfast_lifecycle::StopReason;
use holdfast_test_support::services::{FailWhen, skip_loudly};

/// A Python that imports `websockets`: Debian's first, then whatever `python3` is on PATH.
fn python() -> Option<PathBuf> {
    ["/usr/bin/python3", "python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| {
            Command::new(p)
                .args(["-c", "import websockets"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

// r[verify gateway.auth.token+2]
// r[verify gateway.drain.close+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_websockets_authenticates_joins_receives_and_sees_1012_on_drain() {
    let Some(python) = python() else {
        skip_loudly(
            "python3-websockets",
            "no python3 here imports websockets (apt-get install python3-websockets)",
            FailWhen::Harness,
        );
        return;
    };
    let node = start(config("a")).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(format!("ws://{}/", node.gateway.local_addr()))
        .arg(token("py"))
        .arg("lobby")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // The client's lines, read on a thread of their own.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(serde_json::from_str::<serde_json::Value>(&line).unwrap());
        }
    });
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the Python client said nothing within 10 s")
            .expect("the Python client ended early")
    };
    assert_eq!(next().await["got"]["type"], "authenticated");
    assert_eq!(
        next().await["got"],
        serde_json::json!({"type": "joined", "room": "lobby"})
    );
    assert_eq!(node.gateway.push_room("lobby", "from rust").await.queued, 1);
    // A room message carries its room and position, as gateway.history.position says.
    let got = next().await;
    let got: serde_json::Value = serde_json::from_str(got["got"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&got["room"], &got["text"]),
        (&"lobby".into(), &"from rust".into())
    );
    assert!(got["pos"].as_str().is_some(), "{got}");
    let report = node.gateway.drain(StopReason::Restart, None).await;
    assert_eq!(report.code, 1012);
    let closed = next().await;
    assert_eq!(closed["closed"], 1012, "{closed}");
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}
