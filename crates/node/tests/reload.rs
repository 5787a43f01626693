//! Reload on the `holdfast` binary as a subprocess: `holdfast reload` (and `POST /v1/reload`)
//! applies a changed file per module, refuses an invalid one whole, and leaves what did not change
//! alone (gateway clients stay connected).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Node, Reaped, start_in, write_config};
use holdfast::admin::client::{Target, call_json};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::net::TcpStream;

const BUDGET: &str = "10s";
const FORWARD_TOKEN: &str = "fwd-reload-never-logged-5b1e9a7c3d20";
const KEY: &str = "gateway-reload-key-0123456789";

use common::ws::{close_frame, next_text};

/// Rewrites the node's config with `extra` after the common sections (which stay the same, so
/// only `extra`'s sections change).
fn rewrite(node: &Node, extra: &str) {
    write_config(node.dir.path(), extra, BUDGET, None);
}

fn socket(node: &Node) -> Target {
    Target::Unix(node.dir.path().join("admin.sock"))
}

/// `holdfast reload` against the node (over its socket): exit status, stdout, stderr.
fn reload(node: &Node) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["reload", "--admin", &socket(node).to_string()])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

async fn json_get(node: &Node, path: &str) -> Value {
    serde_json::from_str(&node.get(path).await.unwrap()).unwrap()
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

/// A file of forward tokens beside the config.
fn forward_tokens(dir: &Path) -> PathBuf {
    let tokens = dir.join("forward.tokens");
    std::fs::write(&tokens, format!("{FORWARD_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    tokens
}

fn forward_section(tokens: &Path, allow: &str) -> String {
    format!(
        "[forward]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nallow = [\"{allow}\"]\n",
        tokens.display()
    )
}

/// The forward server's address and pin, once it listens.
async fn forward_listen(node: &Node) -> (String, String) {
    for _ in 0..500 {
        if let Ok(body) = node.get("/v1/forwards").await {
            let view: Value = serde_json::from_str(&body).unwrap();
            if let (Some(listen), Some(pin)) =
                (view["listen"].as_str(), view["fingerprint"].as_str())
            {
                return (listen.to_owned(), pin.to_owned());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the forward never listened");
}

/// Opens a forward to `target` through the node with `holdfast forward udp`: the running client
/// and its local address once the forward is open, else the client's stderr.
fn open_forward(
    listen: &str,
    pin: &str,
    tokens: &Path,
    target: std::net::SocketAddr,
) -> Result<(Reaped, std::net::SocketAddr), String> {
    let local = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut client = Reaped(
        Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args([
                "forward",
                "udp",
                &local.to_string(),
                "--to",
                &target.to_string(),
            ])
            .args(["--node", listen, "--pin", pin, "--token-file"])
            .arg(tokens)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = client.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match lines_rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let event: Value = serde_json::from_str(&line).unwrap_or_default();
                if event["event"] == "opened" {
                    // Keep reading (a full pipe would block the client).
                    std::thread::spawn(move || for _ in lines_rx {});
                    return Ok((client, local));
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let _ = client.wait();
                let mut stderr = String::new();
                use std::io::Read;
                client
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut stderr)
                    .unwrap();
                return Err(stderr);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the forward neither opened nor failed"
        );
    }
}

/// Sends a datagram through the forward whose local end is `local`: whether the echo came back.
fn echoed(peer: &std::net::UdpSocket, local: std::net::SocketAddr, tries: usize) -> bool {
    let mut buf = [0u8; 64];
    for _ in 0..tries {
        peer.send_to(b"through the reloaded forward", local)
            .unwrap();
        if let Ok((n, _)) = peer.recv_from(&mut buf) {
            assert_eq!(&buf[..n], b"through the reloaded forward");
            return true;
        }
    }
    false
}

/// Opens a forward to `target` through the node with `holdfast forward udp` and sends a datagram
/// through it: `Ok` when the echo came back, else the client's stderr.
fn forward_to(
    listen: &str,
    pin: &str,
    tokens: &Path,
    target: std::net::SocketAddr,
) -> Result<(), String> {
    let (_client, local) = open_forward(listen, pin, tokens, target)?;
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    if echoed(&peer, local, 20) {
        Ok(())
    } else {
        Err("the forward opened but nothing came back".to_owned())
    }
}

// r[verify node.reload.apply]
// r[verify node.reload.generation]
// i[verify node.admin.reload]
// i[verify node.cli.reload]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_starts_a_new_module_and_applies_a_changed_allow_list() {
    let target = echo();
    let elsewhere: std::net::SocketAddr =
        format!("127.0.0.1:{}", target.port().wrapping_add(1).max(1))
            .parse()
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tokens = forward_tokens(dir.path());
    let node = start_in(dir, "", BUDGET, None);
    node.until_ready().await;
    let status = json_get(&node, "/v1/status").await;
    assert_eq!(status["config"]["generation"], 1, "{status}");
    assert!(
        status["config"]["loaded_at"]
            .as_str()
            .unwrap()
            .ends_with('Z'),
        "{status}"
    );

    // [forward] appears, allowing only `elsewhere`.
    rewrite(&node, &forward_section(&tokens, &elsewhere.to_string()));
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reloaded: config generation 2"), "{out}");
    assert!(out.contains("forward") && out.contains("appeared"), "{out}");
    assert!(out.contains("pull") && out.contains("unchanged"), "{out}");
    let (listen, pin) = forward_listen(&node).await;
    let refused = forward_to(&listen, &pin, &tokens, target).unwrap_err();
    assert!(
        refused.contains("refused") && refused.contains("allow"),
        "{refused}"
    );

    // The allow-list changes to `target` only: a forward to it works, one to `elsewhere` (no
    // longer allowed) is refused.
    rewrite(&node, &forward_section(&tokens, &target.to_string()));
    let answer = call_json(
        &socket(&node),
        hyper::Method::POST,
        "/v1/reload",
        None,
        &json!({}),
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["generation"], 3, "{answer}");
    assert_eq!(
        answer["modules"],
        json!({"forward": "updated", "pull": "unchanged"}),
        "{answer}"
    );
    assert_eq!(answer["needs_restart"], json!([]), "{answer}");
    let (listen, pin) = forward_listen(&node).await;
    forward_to(&listen, &pin, &tokens, target).unwrap();
    let refused = forward_to(&listen, &pin, &tokens, elsewhere).unwrap_err();
    assert!(refused.contains("refused"), "{refused}");
    let status = json_get(&node, "/v1/status").await;
    assert_eq!(status["config"]["generation"], 3, "{status}");

    // The forward goes away with its section, and is no longer listed.
    rewrite(&node, "");
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("disappeared"), "{out}");
    let modules = json_get(&node, "/v1/modules").await;
    let names: Vec<&str> = modules
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pull"], "{modules}");
    assert_eq!(node.get("/readyz").await.unwrap(), "ready\n");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains(FORWARD_TOKEN), "the forward token was logged");
}

/// `[forward]` allowing each of `allow`.
fn forward_allowing(tokens: &Path, allow: &[std::net::SocketAddr]) -> String {
    let allow: Vec<String> = allow.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[forward]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nallow = [{}]\n",
        tokens.display(),
        allow.join(", ")
    )
}

/// A module's `starts` in `/v1/modules`.
async fn starts(node: &Node, name: &str) -> u64 {
    let modules = json_get(node, "/v1/modules").await;
    modules
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["starts"].as_u64())
        .unwrap_or_else(|| panic!("{name} not listed: {modules}"))
}

/// Waits for the client to exit on its own: its exit status and stderr.
async fn ended(client: &mut Reaped, within: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = client.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the client kept running with a forward the node ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

// r[verify node.reload.live-forward]
// r[verify node.reload.live+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_allow_list_is_taken_live_and_ends_only_the_forwards_no_longer_allowed() {
    let (kept, dropped) = (echo(), echo());
    let dir = tempfile::tempdir().unwrap();
    let tokens = forward_tokens(dir.path());
    let node = start_in(
        dir,
        &forward_allowing(&tokens, &[kept, dropped]),
        BUDGET,
        None,
    );
    node.until_ready().await;
    let (listen, pin) = forward_listen(&node).await;
    let (_keeps, kept_local) = open_forward(&listen, &pin, &tokens, kept).unwrap();
    let (mut ends, dropped_local) = open_forward(&listen, &pin, &tokens, dropped).unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(echoed(&peer, kept_local, 20));
    assert!(echoed(&peer, dropped_local, 20));
    assert_eq!(starts(&node, "forward").await, 1);

    // Only `kept` is allowed now: the module is updated, not restarted.
    rewrite(&node, &forward_allowing(&tokens, &[kept]));
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    let answer = json_get(&node, "/v1/status").await;
    assert_eq!(answer["config"]["generation"], 2, "{answer}");
    assert!(out.contains("forward") && out.contains("updated"), "{out}");
    // The forward to `dropped` ends, its client told why; the one to `kept` goes on relaying.
    let (status, stderr) = ended(&mut ends, Duration::from_secs(20)).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("no longer allows"), "{stderr}");
    assert!(
        echoed(&peer, kept_local, 20),
        "the kept forward stopped relaying"
    );
    assert_eq!(starts(&node, "forward").await, 1, "the module restarted");
    // The same server (its address and pin): a new forward to `dropped` is refused.
    assert_eq!(forward_listen(&node).await, (listen.clone(), pin.clone()));
    let refused = forward_to(&listen, &pin, &tokens, dropped).unwrap_err();
    assert!(refused.contains("refused"), "{refused}");

    // A changed listen address is no live change: the module restarts.
    rewrite(
        &node,
        &forward_allowing(&tokens, &[kept]).replace("127.0.0.1:0", "127.0.0.2:0"),
    );
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("forward") && out.contains("changed"), "{out}");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains(FORWARD_TOKEN), "the forward token was logged");
}

// r[verify node.reload.forward-files+3]
// r[verify node.reload.gateway-files+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_token_file_rotated_in_place_is_taken_at_the_next_reload() {
    let target = echo();
    let dir = tempfile::tempdir().unwrap();
    let tokens = forward_tokens(dir.path());
    // The clients' own copies: the old token, and the one the file is rotated to.
    let old = dir.path().join("old.token");
    std::fs::copy(&tokens, &old).unwrap();
    let new = dir.path().join("new.token");
    std::fs::write(&new, "fwd-reload-rotated-in-place-0a9b8c7d6e\n").unwrap();
    for file in [&old, &new] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let section = forward_allowing(&tokens, &[target]);
    let node = start_in(dir, &section, BUDGET, None);
    node.until_ready().await;
    let (listen, pin) = forward_listen(&node).await;
    let (mut open, _) = open_forward(&listen, &pin, &old, target).unwrap();
    assert!(forward_to(&listen, &pin, &new, target).is_err(), "not yet");

    // The same path, new contents; the config file itself unchanged.
    std::fs::copy(&new, &tokens).unwrap();
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("forward") && out.contains("updated"), "{out}");
    // The running server: the new token accepted, the old one refused, and the connection that
    // authenticated with the old one ended with its forward.
    forward_to(&listen, &pin, &new, target).unwrap();
    let refused = forward_to(&listen, &pin, &old, target).unwrap_err();
    assert!(!refused.is_empty(), "the old token was accepted");
    let (status, stderr) = ended(&mut open, Duration::from_secs(20)).await;
    assert_ne!(status, Some(0), "{stderr}");
    assert_eq!(starts(&node, "forward").await, 1, "the module restarted");
    assert_eq!(forward_listen(&node).await, (listen.clone(), pin.clone()));

    // Read again, the same: unchanged.
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("forward") && l.contains("unchanged")),
        "{out}"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains(FORWARD_TOKEN), "the forward token was logged");
}

// r[verify node.reload.apply]
// r[verify node.reload.node-sections]
// i[verify node.cli.reload]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_changes_nothing_and_reload_says_where_the_typo_is() {
    let node = start_in(tempfile::tempdir().unwrap(), "", BUDGET, None);
    node.until_ready().await;
    let config = node.dir.path().join("holdfast.toml");
    // A typo in a key: the whole file is refused.
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "[pull]\n",
        "[pull]\nenabeld = false\n",
        1,
    );
    std::fs::write(&config, &text).unwrap();
    let (code, out, err) = reload(&node);
    assert_eq!(code, 1, "{out}{err}");
    let at = format!("{}:", config.display());
    assert!(err.contains(&at) && err.contains("enabeld"), "{err}");
    // FILE:LINE:COL: the line and column of the typo.
    let line = text.lines().position(|l| l.starts_with("enabeld")).unwrap() + 1;
    assert!(err.contains(&format!("{at}{line}:1:")), "{err}");
    let status = json_get(&node, "/v1/status").await;
    assert_eq!(status["config"]["generation"], 1, "{status}");
    let faults = status["faults"].as_array().unwrap();
    assert!(
        faults
            .iter()
            .any(|f| f["kind"] == "config_invalid"
                && f["message"].as_str().unwrap().contains("enabeld")),
        "{status}"
    );
    // The pull module was not touched: started once.
    let modules = json_get(&node, "/v1/modules").await;
    assert_eq!(modules[0]["name"], "pull", "{modules}");
    assert_eq!(modules[0]["starts"], 1, "{modules}");

    // The fixed file applies and clears the fault; a changed [node] is applied nowhere and said.
    let fixed = write_config(node.dir.path(), "", "7s", None);
    assert_eq!(fixed, config);
    let (code, out, err) = reload(&node);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("[node] changed: not applied, needs a restart"),
        "{out}"
    );
    let status = json_get(&node, "/v1/status").await;
    assert_eq!(status["config"]["generation"], 2, "{status}");
    assert!(
        !status["faults"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "config_invalid"),
        "{status}"
    );
    let modules = json_get(&node, "/v1/modules").await;
    assert_eq!(modules[0]["starts"], 1, "{modules}");

    // Over TCP without the token: refused, as every mutating call.
    let refused = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/reload",
        None,
        &json!({}),
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

// r[verify node.reload.live+3]
// r[verify node.reload.live-pull+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_set_of_workloads_is_taken_live_without_restarting_the_module() {
    // No Docker daemon needed: the workload module runs (degraded) and takes its set all the same.
    let web = "[[workload]]\nname = \"web\"\nimage = \"busybox:1\"\n";
    let api =
        "[[workload]]\nname = \"api\"\nimage = \"busybox:1\"\ncommand = [\"sleep\", \"1d\"]\n";
    let node = start_in(tempfile::tempdir().unwrap(), web, BUDGET, None);
    node.until_ready().await;
    let before = json_get(&node, "/v1/modules").await;
    let starts = |modules: &Value, name: &str| {
        modules
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .map(|m| m["starts"].clone())
    };
    assert_eq!(starts(&before, "workload"), Some(json!(1)), "{before}");

    rewrite(&node, &format!("{web}{api}"));
    let answer = call_json(
        &socket(&node),
        hyper::Method::POST,
        "/v1/reload",
        None,
        &json!({}),
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        answer["modules"],
        json!({"pull": "updated", "workload": "updated"}),
        "{answer}"
    );
    // The same instances: not stopped, not started again.
    let after = json_get(&node, "/v1/modules").await;
    assert_eq!(starts(&after, "workload"), Some(json!(1)), "{after}");
    assert_eq!(starts(&after, "pull"), Some(json!(1)), "{after}");
    let mut names = Vec::new();
    for _ in 0..250 {
        let workloads = json_get(&node, "/v1/workloads").await;
        names = workloads
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_owned())
            .collect();
        if names.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(names, ["api", "web"]);

    // A change to [workloads] itself is not a set of workloads: the module restarts.
    rewrite(
        &node,
        &format!("{web}{api}[workloads]\nowner = \"reload-test\"\n"),
    );
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("workload  changed"), "{out}");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

/// The running pull module's faults, as "IMAGE-SUBJECT KIND".
async fn pull_faults(node: &Node) -> Vec<String> {
    let status = json_get(node, "/v1/status").await;
    status["faults"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["subject"]["module"] == "pull")
        .map(|f| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            format!("{} {}", text(&f["subject"]["name"]), text(&f["kind"]))
        })
        .collect()
}

// r[verify node.reload.live-pull+2]
// Against the real dockerd and registry (skipped loudly without them). Neither image exists in
// the registry, so nothing is pulled or run: the registry's answer (not found) shows that the
// running module asked for the image added, and the fault of the one removed goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_pull_module_acts_on_the_set_a_reload_replaced() {
    let (Some(docker), Some(registry)) = (
        holdfast_test_support::services::docker(),
        holdfast_test_support::services::registry(),
    ) else {
        return;
    };
    let image = |tag: &str| {
        format!(
            "{}/holdfast-reload-{}/none:{tag}",
            registry.addr,
            std::process::id()
        )
    };
    let workload =
        |tag: &str| format!("[[workload]]\nname = \"web\"\nimage = \"{}\"\n", image(tag));
    let node = start_in(
        tempfile::tempdir().unwrap(),
        &workload("typo"),
        BUDGET,
        Some(&docker.host),
    );
    node.until_ready().await;
    let typo = format!("image {} not-found", image("typo"));
    let fixed = format!("image {} not-found", image("fixed"));
    let mut seen = Vec::new();
    for _ in 0..300 {
        seen = pull_faults(&node).await;
        if seen.contains(&typo) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, [typo]);

    write_config(
        node.dir.path(),
        &workload("fixed"),
        BUDGET,
        Some(&docker.host),
    );
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words == ["pull", "updated"]
        }),
        "{out}"
    );
    for _ in 0..300 {
        seen = pull_faults(&node).await;
        if seen == [fixed.clone()] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen,
        [fixed],
        "the added image is asked for, the removed one forgotten"
    );
    let workloads = json_get(&node, "/v1/workloads").await;
    let images: Vec<&str> = workloads
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["image"].as_str())
        .collect();
    assert_eq!(images, [image("fixed")], "{workloads}");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

/// A node with a `[gateway]` section on `listen`, and the section's text.
fn gateway_section(dir: &Path, listen: &str) -> String {
    let key = dir.join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!(
        "[gateway]\nlisten = \"{listen}\"\nreplica_id = \"gw-r\"\ntoken_key_file = \"{}\"\n\n\
         [gateway.drain]\ntotal = \"3s\"\n",
        key.display()
    )
}

async fn push(node: &Node, room: &str, text: &str) {
    call_json(
        &socket(node),
        hyper::Method::POST,
        "/v1/gateway/push",
        None,
        &json!({"room": room, "text": text}),
    )
    .await
    .unwrap();
}

// r[verify node.reload.apply]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_client_stays_connected_through_a_reload_of_another_module() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = gateway_section(dir.path(), "127.0.0.1:0");
    let tokens = forward_tokens(dir.path());
    let node = start_in(dir, &gateway, BUDGET, None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ws = common::ws::member(&addr, KEY, "ann", "lobby").await;

    // [forward] appears; [gateway] and [pull] are the same.
    rewrite(
        &node,
        &format!("{gateway}\n{}", forward_section(&tokens, "127.0.0.1:53")),
    );
    let began = Instant::now();
    let (code, out, err) = reload(&node);
    let took = began.elapsed();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("gateway") && out.contains("unchanged"),
        "{out}"
    );
    println!("reload with a gateway client open: {took:?}\n{out}");

    // Still the same connection: a push reaches it, and no close frame came.
    push(&node, "lobby", "after the reload").await;
    let text = next_text(&mut ws).await;
    assert!(text.contains("after the reload"), "{text}");
    let shown = json_get(&node, "/v1/gateway").await;
    assert_eq!(shown["authenticated"], 1, "{shown}");
    assert_eq!(shown["last_drain"], Value::Null, "{shown}");
    let modules = json_get(&node, "/v1/modules").await;
    let gateway = modules
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "gateway")
        .unwrap();
    assert_eq!(gateway["starts"], 1, "{modules}");
    assert!(
        close_frame(&mut ws, Duration::from_millis(300))
            .await
            .is_none(),
        "the client was closed"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

// r[verify node.reload.apply]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_gateway_listen_address_drains_it_and_it_listens_on_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_in(dir, "", BUDGET, None);
    let gateway = gateway_section(node.dir.path(), "127.0.0.1:0");
    rewrite(&node, &gateway);
    // Started by a reload (a gateway that appears).
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("appeared"), "{out}");
    let mut addr = None;
    for _ in 0..250 {
        if let Ok(body) = node.get("/v1/gateway").await {
            let shown: Value = serde_json::from_str(&body).unwrap();
            if let Some(a) = shown["replica"]["address"].as_str() {
                addr = Some(a.to_owned());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let old = addr.expect("the gateway never listened");
    let mut ws = common::ws::member(&old, KEY, "bob", "lobby").await;
    let reader = tokio::spawn(async move { close_frame(&mut ws, Duration::from_secs(10)).await });

    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    rewrite(&node, &gateway_section(node.dir.path(), &free.to_string()));
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("gateway") && out.contains("changed"), "{out}");
    // Drained with the restart code, then listening on the new address.
    let frame = reader.await.unwrap().expect("a close frame");
    assert_eq!(u16::from(frame.code), 1012, "{frame:?}");
    let mut ws = common::ws::member(&free.to_string(), KEY, "bob", "lobby").await;
    push(&node, "lobby", "on the new address").await;
    assert!(next_text(&mut ws).await.contains("on the new address"));
    assert!(
        TcpStream::connect(&old).await.is_err(),
        "the old address still listens"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

/// A reload's timeline for the record (run by hand, `--ignored --nocapture`): a node with a
/// gateway client and an open forward, a reload that changes only `[pull]`; what stayed up and how
/// long the reload took, with datagrams sent through the forward every 10 ms all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn reload_timeline() {
    let target = echo();
    let dir = tempfile::tempdir().unwrap();
    let gateway = gateway_section(dir.path(), "127.0.0.1:0");
    let tokens = forward_tokens(dir.path());
    let extra = format!(
        "{gateway}\n{}",
        forward_section(&tokens, &target.to_string())
    );
    let node = start_in(dir, &extra, BUDGET, None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ws = common::ws::member(&addr, KEY, "ann", "lobby").await;
    let (listen, pin) = forward_listen(&node).await;
    let (_client, local) = open_forward(&listen, &pin, &tokens, target).unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(echoed(&peer, local, 20));

    // Datagrams every 10 ms through the open forward, counted, while the reload runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pinger = {
        let stop = stop.clone();
        let peer = peer.try_clone().unwrap();
        peer.set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        std::thread::spawn(move || {
            let (mut sent, mut back) = (0u32, 0u32);
            let mut buf = [0u8; 64];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peer.send_to(b"tick", local).unwrap();
                sent += 1;
                while let Ok((_, _)) = peer.recv_from(&mut buf) {
                    back += 1;
                }
            }
            (sent, back)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Only [pull] changes.
    let config = node.dir.path().join("holdfast.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("base = \"1s\"", "base = \"2s\"")).unwrap();
    let began = Instant::now();
    let (code, out, err) = reload(&node);
    let cli_took = began.elapsed();
    assert_eq!(code, 0, "{out}{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, back) = pinger.join().unwrap();

    push(&node, "lobby", "after the reload").await;
    let pushed = next_text(&mut ws).await.contains("after the reload");
    let closed = close_frame(&mut ws, Duration::from_millis(300)).await;
    let modules = json_get(&node, "/v1/modules").await;
    let starts: Vec<String> = modules
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{} starts={}", m["name"].as_str().unwrap(), m["starts"]))
        .collect();
    let forwards = json_get(&node, "/v1/forwards").await;
    println!("reload timeline (a node with 1 gateway client and 1 open forward; [pull] changed):");
    print!("{out}");
    println!("holdfast reload, wall clock: {cli_took:?}");
    println!(
        "datagrams through the open forward over the ~0.6 s around the reload: {sent} sent, {back} echoed"
    );
    println!("gateway client: push after the reload received = {pushed}, close frame = {closed:?}");
    println!("modules: {}", starts.join(", "));
    println!(
        "forwards open after the reload: {}",
        forwards["forwards"].as_array().map_or(0, Vec::len)
    );
    assert!(pushed && closed.is_none());
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

// i[verify node.config.no-values]
// r[verify node.reload.apply]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_never_shows_a_mistyped_secret() {
    const SECRET: &str = "S3CR3T-forward-token-never-shown-0123456789";
    let node = start_in(tempfile::tempdir().unwrap(), "", BUDGET, None);
    node.until_ready().await;
    // An inline token written as a string instead of a list of strings.
    rewrite(
        &node,
        &format!(
            "[forward]\nlisten = \"127.0.0.1:0\"\ntokens = \"{SECRET}\"\nallow = [\"127.0.0.1:53\"]\n"
        ),
    );
    let (code, out, err) = reload(&node);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("forward.tokens"), "{err}");
    assert!(!out.contains(SECRET) && !err.contains(SECRET), "{out}{err}");
    // The faults are served without a token: the value is not among them.
    let faults = node.get("/v1/faults").await.unwrap();
    assert!(faults.contains("config_invalid"), "{faults}");
    assert!(!faults.contains(SECRET), "{faults}");
    node.signal(Signal::SIGTERM);
    let (_, _, log) = node.wait(Duration::from_secs(15));
    assert!(log.contains("reload refused"), "{log}");
    assert!(!log.contains(SECRET), "{log}");
}

/// The node's faults, once `ready` holds of them (at most 10 s).
async fn faults_until(node: &Node, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut faults = Vec::new();
    for _ in 0..500 {
        faults =
            serde_json::from_str::<Vec<Value>>(&node.get("/v1/faults").await.unwrap()).unwrap();
        if ready(&faults) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    faults
}

// r[verify node.reload.apply]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_went_leaves_no_fault_and_no_readiness_behind() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = forward_tokens(dir.path());
    let node = start_in(dir, &forward_section(&tokens, "127.0.0.1:53"), BUDGET, None);
    node.until_ready().await;
    forward_listen(&node).await;
    // No Docker daemon: the pull module has its fault.
    let faults = faults_until(&node, |f| {
        f.iter().any(|f| f["subject"]["module"] == "pull")
    })
    .await;
    assert!(
        faults.iter().any(|f| f["subject"]["module"] == "pull"),
        "{faults:?}"
    );
    let ready = "holdfast_module_ready{module=\"forward\"} 1";
    let mut metrics = String::new();
    for _ in 0..500 {
        metrics = node.get("/metrics").await.unwrap();
        if metrics.contains(ready) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(metrics.contains(ready), "{metrics}");

    // Both go: pull turned off, [forward] removed.
    let config = write_config(node.dir.path(), "", BUDGET, None);
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "[pull]\n",
        "[pull]\nenabled = false\n",
        1,
    );
    std::fs::write(&config, text).unwrap();
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json_get(&node, "/v1/modules").await, json!([]));
    let faults: Vec<Value> = serde_json::from_str(&node.get("/v1/faults").await.unwrap()).unwrap();
    assert!(
        !faults.iter().any(|f| f["subject"]["module"] == "pull"),
        "{faults:?}"
    );
    let metrics = node.get("/metrics").await.unwrap();
    assert!(!metrics.contains(ready), "{metrics}");
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

/// A fake node on a Unix socket: `/v1/status` names generation 1, then 2 once the reload was
/// asked for; `/v1/reload` is answered `reload_status` (and an empty JSON object).
async fn fake_node(socket: &Path, reload_status: &'static str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(async move {
        let mut generation = 1;
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let (status, body) = if head.starts_with("POST /v1/reload") {
                generation = 2;
                (reload_status, "{}".to_owned())
            } else {
                (
                    "200 OK",
                    format!("{{\"config\":{{\"generation\":{generation}}}}}"),
                )
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
}

// i[verify node.cli.reload]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_whose_answer_is_lost_is_unknown_and_the_generation_says_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("admin.sock");
    fake_node(&socket, "408 Request Timeout").await;
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(["reload", "--admin", &Target::Unix(socket).to_string()])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("outcome is unknown"), "{err}");
    assert!(err.contains("from 1 to 2: a reload applied"), "{err}");
}

// r[verify node.reload.apply]
// i[verify node.cli.reload]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_the_reload_starts_that_fails_is_reported_failed() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = forward_tokens(dir.path());
    let node = start_in(dir, &forward_section(&tokens, "127.0.0.1:53"), BUDGET, None);
    node.until_ready().await;
    forward_listen(&node).await;
    // The forward moves to a port something else holds (UDP: the forward is QUIC).
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap();
    let section = forward_section(&tokens, "127.0.0.1:53")
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{port}\""));
    rewrite(&node, &section);
    let (code, out, err) = reload(&node);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("forward failed to start"), "{out}");
    let status = json_get(&node, "/v1/status").await;
    assert_eq!(status["config"]["generation"], 2, "{status}");
    drop(taken);
    node.signal(Signal::SIGTERM);
    let (_, _, log) = node.wait(Duration::from_secs(15));
    assert!(log.contains("config reloaded"), "{log}");
}

/// The reload: on a node with a workload, a forward, an issuance hostname and a gateway
/// (with a client and two open forwards), one reload adds a workload, narrows the forward's
/// allow-list and adds an issuance hostname. All three apply without a restart of their module;
/// the gateway client stays connected (no close frame), the forward to a target still allowed
/// keeps relaying and the one to a target no longer allowed ends with its reason. Prints the
/// reload's timeline (`--nocapture`). No Docker daemon needed: the workload module runs degraded
/// and takes its new set all the same.
// r[verify node.reload.live+3]
// r[verify node.reload.live-forward]
// r[verify node.reload.live-issuance]
// r[verify node.reload.apply]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reload_takes_a_workload_an_allow_list_and_a_hostname_live_and_drops_no_client() {
    let (kept, dropped) = (echo(), echo());
    // A loopback port nothing listens on: the local certificate provider is down, so each
    // hostname's attempt fails, which is enough to see it decided.
    let provider = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gateway = gateway_section(dir.path(), "127.0.0.1:0");
    let tokens = forward_tokens(dir.path());
    let web = "[[workload]]\nname = \"web\"\nimage = \"busybox:1\"\n";
    let api =
        "[[workload]]\nname = \"api\"\nimage = \"busybox:1\"\ncommand = [\"sleep\", \"1d\"]\n";
    let host =
        |name: &str| format!("[[issuance.hostname]]\nname = \"{name}\"\nsource = \"local\"\n");
    let issuance = |hosts: &[String]| {
        format!(
            "[issuance]\ntick = \"1s\"\n[issuance.local]\nendpoint = {{ tcp = \"{provider}\" }}\n{}",
            hosts.concat()
        )
    };
    let file = |workloads: &str, allow: &[std::net::SocketAddr], hosts: &[String]| {
        format!(
            "{workloads}{gateway}\n{}{}",
            forward_allowing(&tokens, allow),
            issuance(hosts)
        )
    };
    let node = start_in(
        dir,
        &file(web, &[kept, dropped], &[host("a.example")]),
        BUDGET,
        None,
    );
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ws = common::ws::member(&addr, KEY, "ann", "lobby").await;
    let (listen, pin) = forward_listen(&node).await;
    let (_keeps, kept_local) = open_forward(&listen, &pin, &tokens, kept).unwrap();
    let (mut ends, dropped_local) = open_forward(&listen, &pin, &tokens, dropped).unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(echoed(&peer, kept_local, 20));
    assert!(echoed(&peer, dropped_local, 20));
    let before = json_get(&node, "/v1/modules").await;

    // One reload: a workload added, `dropped` no longer allowed, a hostname added.
    rewrite(
        &node,
        &file(
            &format!("{web}{api}"),
            &[kept],
            &[host("a.example"), host("b.example")],
        ),
    );
    let began = Instant::now();
    let answer = call_json(
        &socket(&node),
        hyper::Method::POST,
        "/v1/reload",
        None,
        &json!({}),
    )
    .await
    .unwrap();
    let took = began.elapsed();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        answer["modules"],
        json!({
            "forward": "updated",
            "gateway": "unchanged",
            "issuance": "updated",
            "pull": "updated",
            "workload": "updated",
        }),
        "{answer}"
    );
    assert_eq!(answer["failed"], json!({}), "{answer}");

    // The forward to `dropped` ends with its reason; the one to `kept` relays on.
    let (status, stderr) = ended(&mut ends, Duration::from_secs(20)).await;
    let dropped_ended = began.elapsed();
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("no longer allows"), "{stderr}");
    assert!(
        echoed(&peer, kept_local, 20),
        "the kept forward stopped relaying"
    );
    // The gateway client is still connected: no close frame, and a push reaches it.
    push(&node, "lobby", "after the reload").await;
    assert!(next_text(&mut ws).await.contains("after the reload"));
    let closed = close_frame(&mut ws, Duration::from_millis(300)).await;
    assert!(closed.is_none(), "{closed:?}");
    // The workloads and the hostnames are the new sets.
    let mut workloads = Vec::new();
    let mut hostnames = Vec::new();
    for _ in 0..250 {
        let listed = json_get(&node, "/v1/workloads").await;
        workloads = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_owned())
            .collect();
        let certs = json_get(&node, "/v1/certs").await;
        hostnames = certs
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .filter_map(|c| c["hostname"].as_str().map(str::to_owned))
            .collect();
        if workloads.len() == 2 && hostnames.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(workloads, ["api", "web"]);
    assert_eq!(hostnames, ["a.example", "b.example"]);
    // The added hostname is decided at the module's next tick (1 s): attempted, and failed
    // against the provider that is down.
    let mut added = Value::Null;
    for _ in 0..250 {
        let certs = json_get(&node, "/v1/certs").await;
        added = certs
            .as_array()
            .and_then(|c| c.iter().find(|c| c["hostname"] == "b.example"))
            .cloned()
            .unwrap_or(Value::Null);
        if added["failures"].as_u64().unwrap_or(0) >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        added["failures"].as_u64().unwrap_or(0) >= 1 && !added["last_error"].is_null(),
        "b.example was not attempted after the reload: {added}"
    );
    // Nothing started again (the pull module took its new set of images live).
    let after = json_get(&node, "/v1/modules").await;
    let starts_of = |modules: &Value| -> Vec<(String, u64)> {
        modules
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_owned(),
                    m["starts"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    for ((name, was), (_, now)) in starts_of(&before).iter().zip(starts_of(&after)) {
        assert_eq!(*was, now, "{name} restarted: {after}");
    }
    let gateway = json_get(&node, "/v1/gateway").await;
    assert_eq!(gateway["connections"], 1, "{gateway}");

    println!(
        "reload timeline (a workload added, the forward's allow-list narrowed, a hostname added):"
    );
    println!(
        "POST /v1/reload answered in {} ms (node: {} ms)",
        took.as_millis(),
        answer["took_ms"]
    );
    println!("modules: {}", answer["modules"]);
    println!(
        "forward to the target no longer allowed ended {} ms after the reload began: {}",
        dropped_ended.as_millis(),
        stderr.lines().last().unwrap_or_default()
    );
    println!("forward to the target still allowed: relaying after the reload = true");
    println!(
        "gateway client: connected = {}, close frame = {closed:?}, push after the reload received = true",
        gateway["connections"] == 1
    );
    println!(
        "module starts before/after: {:?} / {:?}",
        starts_of(&before),
        starts_of(&after)
    );

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains(FORWARD_TOKEN), "the forward token was logged");
}

// r[verify node.reload.live-gateway+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_gateway_limits_are_taken_live_and_drain_no_client() {
    use futures_util::SinkExt as _;
    let dir = tempfile::tempdir().unwrap();
    let gateway = gateway_section(dir.path(), "127.0.0.1:0");
    let node = start_in(dir, &gateway, BUDGET, None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ws = common::ws::member(&addr, KEY, "ann", "lobby").await;

    // One connection per source, one room per connection and room names of 4 bytes at most
    // from now on: the one open stays (in its room, whose name is longer), a second is refused.
    rewrite(
        &node,
        &gateway.replace(
            "[gateway.drain]",
            "per_ip_limit = 1\nmax_rooms_per_connection = 1\nmax_room_name = 4\n\n[gateway.drain]",
        ),
    );
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("gateway") && out.contains("updated"), "{out}");
    assert_eq!(starts(&node, "gateway").await, 1, "the gateway restarted");
    push(&node, "lobby", "after the reload").await;
    assert!(next_text(&mut ws).await.contains("after the reload"));
    assert!(
        close_frame(&mut ws, Duration::from_millis(300))
            .await
            .is_none()
    );
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let refused = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503, "{response:?}");
        }
        other => panic!("a second connection from the source was not refused with 503: {other:?}"),
    }
    // The joins are held to the new room limits.
    let join = |room: &str| {
        tokio_tungstenite::tungstenite::Message::Text(
            serde_json::json!({"type": "join", "room": room})
                .to_string()
                .into(),
        )
    };
    ws.send(join("longer")).await.unwrap();
    let answer: Value = serde_json::from_str(&next_text(&mut ws).await).unwrap();
    assert_eq!(answer["reason"], "room name too long", "{answer}");
    ws.send(join("abc")).await.unwrap();
    let answer: Value = serde_json::from_str(&next_text(&mut ws).await).unwrap();
    assert_eq!(answer["reason"], "too many rooms", "{answer}");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

// r[verify node.reload.gateway-files+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_has_the_gateway_take_a_key_file_rotated_in_place() {
    use futures_util::{SinkExt as _, StreamExt as _};
    const NEW: &str = "gateway-reload-key-rotated-9876543210";
    let dir = tempfile::tempdir().unwrap();
    // The key files are polled once an hour: only the reload can have the new key taken now.
    let gateway = format!(
        "{}\n[gateway.auth]\nreload_interval = \"1h\"\n",
        gateway_section(dir.path(), "127.0.0.1:0")
    );
    let key = dir.path().join("gateway.key");
    let node = start_in(dir, &gateway, BUDGET, None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    std::fs::write(&key, format!("{NEW}\n")).unwrap();
    // The file rotated in place: the config is the same, the gateway is not restarted.
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(starts(&node, "gateway").await, 1, "the gateway restarted");
    // Its check runs off the reload's task: a token signed with the new key is accepted soon.
    let token = holdfast_gateway::Signer::new(NEW.as_bytes())
        .token(
            "ann",
            std::time::SystemTime::now() + Duration::from_secs(3600),
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let tcp = TcpStream::connect(&addr).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
            .await
            .unwrap();
        ws.send(tokio_tungstenite::tungstenite::Message::Text(
            json!({"type": "auth", "token": token}).to_string().into(),
        ))
        .await
        .unwrap();
        // A refused token closes the connection, naming why.
        let answer = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .ok()
            .flatten();
        if let Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text))) = &answer
            && text.contains("\"authenticated\"")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a token signed with the rotated key is refused after the reload: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

/// Connects to the gateway at `addr` and presents a token signed with `key`: the first answer
/// (`authenticated`, or the close frame's reason).
async fn auth_answer(addr: &str, key: &str, user: &str) -> String {
    use futures_util::{SinkExt as _, StreamExt as _};
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    let token = holdfast_gateway::Signer::new(key.as_bytes())
        .token(
            user,
            std::time::SystemTime::now() + Duration::from_secs(3600),
        )
        .unwrap();
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        json!({"type": "auth", "token": token}).to_string().into(),
    ))
    .await
    .unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("an answer within 5 s")
        {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t))) => return t.to_string(),
            Some(Ok(tokio_tungstenite::tungstenite::Message::Close(frame))) => {
                return format!("closed: {frame:?}");
            }
            None => return "closed".into(),
            Some(Ok(_)) => {}
            Some(Err(e)) => return format!("error: {e}"),
        }
    }
}

/// The faults `/v1/faults` lists now, as text.
async fn faults_text(node: &Node) -> String {
    node.get("/v1/faults").await.unwrap()
}

// A changed key file path is taken live: the client connected before stays (no close frame, no
// restart), a token signed with the new key is accepted and one with the old refused; a path
// that cannot be read changes nothing and the reload's error and fault name it (the config's
// validation refuses this one, as it reads every key file; a file that goes bad after it is
// judged by the reload's own read: run.rs's only_a_from_issuance_pair_not_issued_yet_restarts_the_gateway).
// r[verify node.reload.live-gateway+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_key_file_path_is_taken_live_and_drains_no_client() {
    const NEW: &str = "gateway-reload-other-key-9876543210";
    let dir = tempfile::tempdir().unwrap();
    let gateway = gateway_section(dir.path(), "127.0.0.1:0");
    let old_key = dir.path().join("gateway.key");
    let new_key = dir.path().join("other.key");
    std::fs::write(&new_key, format!("{NEW}\n")).unwrap();
    std::fs::set_permissions(&new_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let node = start_in(dir, &gateway, BUDGET, None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ws = common::ws::member(&addr, KEY, "ann", "lobby").await;

    // A path that cannot be read: refused, nothing changes.
    let missing = node.dir.path().join("missing.key");
    let path = |to: &Path| {
        gateway.replace(
            &format!("token_key_file = \"{}\"", old_key.display()),
            &format!("token_key_file = \"{}\"", to.display()),
        )
    };
    rewrite(&node, &path(&missing));
    let (code, out, err) = reload(&node);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains(&missing.display().to_string()), "{out}{err}");
    let faults = faults_text(&node).await;
    assert!(
        faults.contains("config_invalid") && faults.contains(&missing.display().to_string()),
        "{faults}"
    );
    assert!(
        auth_answer(&addr, KEY, "bob")
            .await
            .contains("authenticated")
    );

    // The new path: taken live.
    rewrite(&node, &path(&new_key));
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("gateway") && out.contains("updated"), "{out}");
    assert_eq!(starts(&node, "gateway").await, 1, "the gateway restarted");
    assert!(!faults_text(&node).await.contains("config_invalid"));
    let answer = auth_answer(&addr, NEW, "cy").await;
    assert!(answer.contains("authenticated"), "{answer}");
    let answer = auth_answer(&addr, KEY, "eve").await;
    assert!(
        answer.starts_with("closed"),
        "the old key still verifies: {answer}"
    );
    // The client authenticated with the old key is still connected and served.
    push(&node, "lobby", "after the reload").await;
    assert!(next_text(&mut ws).await.contains("after the reload"));
    assert!(
        close_frame(&mut ws, Duration::from_millis(300))
            .await
            .is_none(),
        "the client was closed"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains(NEW) && !log.contains(KEY), "a key was logged");
}

/// Takes any certificate: the tests look at which one the gateway served.
#[derive(Debug)]
struct AnyCert;

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls_pki_types::CertificateDer<'_>,
        _: &[rustls_pki_types::CertificateDer<'_>],
        _: &rustls_pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls_pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls_pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

type Wss = tokio_tungstenite::tungstenite::WebSocket<
    rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
>;

/// A self-signed pair for `localhost` under `dir`: its `cert = …`/`key = …` lines and its DER.
fn pair_in(dir: &Path) -> (String, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (
        format!("cert = \"{}\"\nkey = \"{}\"\n", c.display(), k.display()),
        cert.der().to_vec(),
    )
}

/// A `wss://` client (blocking) authenticated as `user` in `room`, and the leaf it was shown.
fn wss_member(addr: &str, user: &str, room: &str) -> (Wss, Vec<u8>) {
    let (ws, leaf, joined) = wss_try(addr, KEY, user, room);
    joined.unwrap();
    (ws, leaf)
}

/// A `wss://` client (blocking) that authenticates as `user` with a token signed by `key` and
/// joins `room`: the client, the leaf it was shown, and whether the gateway took it (else what
/// ended it).
fn wss_try(addr: &str, key: &str, user: &str, room: &str) -> (Wss, Vec<u8>, Result<(), String>) {
    use tokio_tungstenite::tungstenite::Message;
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(std::sync::Arc::new(AnyCert))
    .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    let leaf = tls.conn.peer_certificates().unwrap()[0].to_vec();
    let (mut ws, _) = tokio_tungstenite::tungstenite::client("wss://localhost/", tls).unwrap();
    let token = holdfast_gateway::Signer::new(key.as_bytes())
        .token(
            user,
            std::time::SystemTime::now() + Duration::from_secs(3600),
        )
        .unwrap();
    for message in [
        json!({"type": "auth", "token": token}),
        json!({"type": "join", "room": room}),
    ] {
        ws.send(Message::Text(message.to_string().into())).unwrap();
        if let Err(ended) = wss_text(&mut ws) {
            return (ws, leaf, Err(ended));
        }
    }
    (ws, leaf, Ok(()))
}

/// The next text (pings skipped), or what ended the wait (a close frame, an error, the read
/// timeout).
fn wss_text(ws: &mut Wss) -> Result<String, String> {
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => return Ok(t.to_string()),
            Ok(Message::Close(frame)) => return Err(format!("close frame {frame:?}")),
            Ok(_) => {}
            Err(e) => return Err(format!("{e}")),
        }
    }
}

// A changed TLS pair path is taken live: the client connected before keeps its session (no
// close frame, no restart), new handshakes are served the new pair; a pair that cannot be read
// changes nothing and the reload's error and fault name it.
// r[verify node.reload.live-gateway+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tls_pair_path_is_taken_live_and_drains_no_client() {
    let dir = tempfile::tempdir().unwrap();
    let (first, first_der) = pair_in(&dir.path().join("a"));
    let (second, second_der) = pair_in(&dir.path().join("b"));
    let gateway = gateway_section(dir.path(), "127.0.0.1:0");
    let with = |pair: &str| format!("{gateway}\n[gateway.tls]\n{pair}");
    let node = start_in(dir, &with(&first), BUDGET, None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let (mut old, seen) = wss_member(&addr, "ann", "lobby");
    assert_eq!(seen, first_der);

    // A pair that cannot be read: refused, nothing changes.
    let missing = node.dir.path().join("none/cert.pem");
    rewrite(
        &node,
        &with(&format!(
            "cert = \"{}\"\nkey = \"{}\"\n",
            missing.display(),
            node.dir.path().join("none/key.pem").display()
        )),
    );
    let (code, out, err) = reload(&node);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains(&missing.display().to_string()), "{out}{err}");
    let faults = faults_text(&node).await;
    assert!(
        faults.contains("config_invalid") && faults.contains(&missing.display().to_string()),
        "{faults}"
    );
    let (_ws, seen) = wss_member(&addr, "bob", "lobby");
    assert_eq!(seen, first_der);

    // The other pair: taken live.
    rewrite(&node, &with(&second));
    let (code, out, err) = reload(&node);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("gateway") && out.contains("updated"), "{out}");
    assert_eq!(starts(&node, "gateway").await, 1, "the gateway restarted");
    let (_ws, seen) = wss_member(&addr, "cy", "lobby");
    assert_eq!(seen, second_der);
    // The client of the first pair is still connected and served, with no close frame.
    push(&node, "lobby", "after the reload").await;
    let text = wss_text(&mut old).unwrap();
    assert!(text.contains("after the reload"), "{text}");
    old.get_mut()
        .sock
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let after = wss_text(&mut old).unwrap_err();
    assert!(
        !after.contains("close frame"),
        "the client was closed: {after}"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
}

// One reload gives the gateway another TLS pair and another token key file together while a
// client is connected: the gateway is updated, not restarted; the client keeps its TLS session
// and its room (a push reaches it, no close frame); every handshake after the reload is served
// the new pair, a token of the new key is taken and one of the old key refused. The steps are
// printed with their time since the reload was asked for (shown with --nocapture).
// r[verify node.reload.live-gateway+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reload_swaps_the_tls_pair_and_the_key_file_live_and_keeps_the_client() {
    const NEW: &str = "gateway-reload-swapped-key-5647382910";
    let dir = tempfile::tempdir().unwrap();
    let (first, first_der) = pair_in(&dir.path().join("a"));
    let (second, second_der) = pair_in(&dir.path().join("b"));
    let gateway = gateway_section(dir.path(), "127.0.0.1:0");
    let old_key = dir.path().join("gateway.key");
    let new_key = dir.path().join("other.key");
    std::fs::write(&new_key, format!("{NEW}\n")).unwrap();
    std::fs::set_permissions(&new_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let with = |key: &Path, pair: &str| {
        let section = gateway.replace(
            &format!("token_key_file = \"{}\"", old_key.display()),
            &format!("token_key_file = \"{}\"", key.display()),
        );
        format!("{section}\n[gateway.tls]\n{pair}")
    };
    let node = start_in(dir, &with(&old_key, &first), BUDGET, None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let (mut old, seen) = wss_member(&addr, "ann", "lobby");
    assert_eq!(seen, first_der);

    rewrite(&node, &with(&new_key, &second));
    let asked = Instant::now();
    let mut timeline = Vec::new();
    let mut at = |what: String| {
        timeline.push(format!(
            "{:>7.1} ms  {what}",
            asked.elapsed().as_secs_f64() * 1e3
        ))
    };
    let (code, out, err) = reload(&node);
    at(format!(
        "`holdfast reload` answered (exit {code}): {}",
        out.trim()
    ));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("gateway") && out.contains("updated"), "{out}");
    assert_eq!(starts(&node, "gateway").await, 1, "the gateway restarted");

    let (_cy, seen, joined) = wss_try(&addr, NEW, "cy", "lobby");
    at(format!(
        "new client: handshake served the {} pair, new-key token {}",
        if seen == second_der { "new" } else { "OLD" },
        if joined.is_ok() { "taken" } else { "refused" }
    ));
    assert_eq!(
        seen, second_der,
        "a handshake after the reload got the old pair"
    );
    joined.unwrap();
    let (_eve, seen, refused) = wss_try(&addr, KEY, "eve", "lobby");
    at(format!(
        "new client with an old-key token: {}",
        refused.as_ref().err().map_or("taken", String::as_str)
    ));
    assert_eq!(seen, second_der);
    assert!(refused.is_err(), "a token of the old key still verifies");

    push(&node, "lobby", "after the swap").await;
    let text = wss_text(&mut old).unwrap();
    at(format!(
        "client connected before the reload got the push: {text}"
    ));
    assert!(text.contains("after the swap"), "{text}");
    old.get_mut()
        .sock
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let after = wss_text(&mut old).unwrap_err();
    at(format!("that client, 300 ms more: {after}"));
    assert!(
        !after.contains("close frame"),
        "the client was closed: {after}"
    );
    let shown = json_get(&node, "/v1/gateway").await;
    assert_eq!(shown["last_drain"], Value::Null, "{shown}");
    println!(
        "reload swapping the TLS pair and the key file:\n{}",
        timeline.join("\n")
    );

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains(NEW) && !log.contains(KEY), "a key was logged");
}
