//! The forward module inside a running node, and `holdfast forward udp` through it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::start_in;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const FORWARD_TOKEN: &str = "fwd-7d2a-never-logged-0c5e91b3f6a4";

fn holdfast(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A UDP echo on loopback, on its own thread.
fn echo() -> std::net::SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(&buf[..n], peer);
        }
    });
    addr
}

fn forward_node(allow: &str) -> (common::Node, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("forward.tokens");
    std::fs::write(&tokens, format!("# one token a line\n{FORWARD_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "[forward]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nallow = [\"{allow}\"]\n",
        tokens.display()
    );
    (start_in(dir, &extra, "10s", None), tokens)
}

async fn listing(node: &common::Node) -> serde_json::Value {
    for _ in 0..500 {
        if let Ok(body) = node.get("/v1/forwards").await {
            return serde_json::from_str(&body).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("/v1/forwards never answered");
}

// r[verify node.forward.module+2]
// r[verify node.forward.metrics]
// r[verify node.forward.metrics.server+2]
// r[verify node.metrics.runtime-tasks]
// i[verify node.forward.list]
// i[verify node.forward.identity]
// i[verify node.forward.cli.udp]
#[tokio::test]
async fn a_datagram_is_echoed_through_holdfast_forward_udp() {
    let target = echo();
    let (node, tokens) = forward_node(&format!("127.0.0.1:{}", target.port()));
    node.until_ready().await;
    let view = listing(&node).await;
    let listen = view["listen"].as_str().unwrap().to_owned();
    let pin = view["fingerprint"].as_str().unwrap().to_owned();
    // `holdfast forward identity` prints the same pin from the data directory.
    let data = node.dir.path().join("data");
    let (code, out, err) = holdfast(&["forward", "identity", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), pin);

    let local = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let mut client = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args([
            "forward",
            "udp",
            &local.to_string(),
            "--to",
            &target.to_string(),
        ])
        .args(["--node", &listen, "--pin", &pin, "--token-file"])
        .arg(&tokens)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Not a terminal: one JSON event a line. Wait for the forward to open.
    let stdout = client.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut events = Vec::new();
    loop {
        let line = lines_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        events.push(event.clone());
        if event["event"] == "opened" {
            break;
        }
        assert!(Instant::now() < deadline, "{events:?}");
    }
    assert!(
        events.iter().any(|e| e["event"] == "connected"),
        "{events:?}"
    );

    // A datagram through the forward comes back from the echo.
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    let mut echoed = None;
    for _ in 0..20 {
        peer.send_to(b"ping through holdfast", local).unwrap();
        if let Ok((n, _)) = peer.recv_from(&mut buf) {
            echoed = Some(buf[..n].to_vec());
            break;
        }
    }
    assert_eq!(echoed.as_deref(), Some(&b"ping through holdfast"[..]));

    // The node lists the forward with its stats, in the API, the CLI and the metrics.
    // The relay counts a datagram after its send returns, which may be after the echo came back.
    let mut view = listing(&node).await;
    for _ in 0..100 {
        if view["forwards"][0]["stats"]["to_target_datagrams"].as_u64() >= Some(1)
            && view["forwards"][0]["stats"]["from_target_datagrams"].as_u64() >= Some(1)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        view = listing(&node).await;
    }
    let forwards = view["forwards"].as_array().unwrap();
    assert_eq!(forwards.len(), 1, "{view}");
    assert_eq!(forwards[0]["target"], target.to_string());
    assert!(
        forwards[0]["stats"]["to_target_datagrams"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let (code, table, _) = holdfast(&["forwards", "--admin", &node.admin.to_string()]);
    assert_eq!(code, 0);
    assert!(
        table.contains(&target.to_string()) && table.contains("TARGET"),
        "{table}"
    );
    let metrics = node.get("/metrics").await.unwrap();
    assert!(metrics.contains("holdfast_forwards_active 1"), "{metrics}");
    // The server's own figures: the client's connection, its address validated by a Retry.
    for series in [
        "holdfast_forward_connections{state=\"authenticated\"} 1",
        "holdfast_forward_retries_total{reason=\"address_validation\"} 1",
        "holdfast_forward_refused_total{reason=\"auth_failed\"} 0",
        "holdfast_forward_flow_sockets 1",
        "holdfast_runtime_tasks_alive ",
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    assert!(
        metrics.contains(&format!(
            "holdfast_forward_datagrams_total{{forward=\"1/1\",target=\"{target}\",direction=\"from_target\"}}"
        )),
        "{metrics}"
    );
    // The supervisor knows the module by its name, in the metrics and in the module list.
    assert!(
        metrics.contains("holdfast_module_starts_total{module=\"forward\"} "),
        "{metrics}"
    );
    let modules: serde_json::Value =
        serde_json::from_str(&node.get("/v1/modules").await.unwrap()).unwrap();
    let module = modules
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "forward");
    assert_eq!(
        module.map(|m| m["group"].clone()),
        Some(serde_json::json!("forward")),
        "{modules}"
    );

    // SIGINT: the client prints its summary and exits 0.
    kill(
        Pid::from_raw(i32::try_from(client.id()).unwrap()),
        Signal::SIGINT,
    )
    .unwrap();
    let status = client.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // Every line up to the end of its stdout (the reader thread ends at EOF).
    let rest: Vec<String> = lines_rx.iter().collect();
    let summary: serde_json::Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert_eq!(summary["event"], "summary", "{rest:?}");
    assert!(summary["stats"]["from_target_datagrams"].as_u64().unwrap() >= 1);

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains(FORWARD_TOKEN), "the forward token was logged");
}

// i[verify node.forward.cli.udp]
#[tokio::test]
async fn a_target_outside_the_allow_list_is_refused_with_its_reason_on_stderr() {
    let target = echo();
    // Allow only another port.
    let (node, tokens) = forward_node(&format!(
        "127.0.0.1:{}",
        target.port().wrapping_add(1).max(1)
    ));
    node.until_ready().await;
    let view = listing(&node).await;
    let listen = view["listen"].as_str().unwrap().to_owned();
    let pin = view["fingerprint"].as_str().unwrap().to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["forward", "udp", "127.0.0.1:0", "--to", &target.to_string()])
        .args(["--node", &listen, "--pin", &pin, "--token-file"])
        .arg(&tokens)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused") && stderr.contains("allow"),
        "{stderr}"
    );
    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0);
}
