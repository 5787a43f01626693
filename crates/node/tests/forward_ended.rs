//! `holdfast forward udp` against a forward server whose allow-list changes under it: a forward the
//! node ends as not allowed is what retrying cannot fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use holdfast_forward::{Access, AllowList, Credential, ServerConfig};

const FORWARD_TOKEN: &str = "fwd-5b1e-never-logged-a8c04d27e913";

// i[verify node.forward.cli.udp]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_the_node_ends_as_not_allowed_ends_the_client_with_the_reason() {
    // The target: nothing needs to answer, the forward only has to open.
    let target = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = target.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), dir.path());
    config.credentials = vec![Credential::new(FORWARD_TOKEN)];
    config.allow = AllowList::parse([target.to_string().as_str()]).unwrap();
    let server = holdfast_forward::start(config).await.unwrap();
    let tokens = dir.path().join("forward.tokens");
    std::fs::write(&tokens, format!("{FORWARD_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();

    let mut client = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["forward", "udp", "127.0.0.1:0", "--to", &target.to_string()])
        .args(["--node", &server.local_addr().unwrap().to_string()])
        .args(["--pin", &server.fingerprint().to_string(), "--token-file"])
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
    let mut events = Vec::new();
    loop {
        let line = lines_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        events.push(event.clone());
        if event["event"] == "opened" {
            break;
        }
    }

    // The node's allow-list no longer reaches the target; the token is still good, so the
    // connection stays up and only the forward ends.
    server.update_access(Access {
        credentials: vec![Credential::new(FORWARD_TOKEN)],
        allow: AllowList::parse(["127.0.0.1:9"]).unwrap(),
        scoped: Vec::new(),
    });

    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = client.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = client.kill();
            panic!("the client kept running with a forward the node ended: {events:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&target.to_string()) && stderr.contains("allow"),
        "the node's reason, naming the target: {stderr}"
    );
    server
        .stop(tokio::time::Instant::now() + Duration::from_secs(5))
        .await
        .unwrap();
}
