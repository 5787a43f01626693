//! The `holdfast` binary as a subprocess: admin endpoints, signals, stop budget, exit status, and
//! logs that never carry the token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TOKEN, start};
use holdfast::admin::client::{Target, call};
use holdfast::admin::token;
use nix::sys::signal::Signal;

// i[verify node.admin.endpoints]
// i[verify node.admin.readyz]
// r[verify node.pull.degraded]
#[tokio::test]
async fn admin_endpoints_answer_and_a_missing_docker_is_one_fault() {
    let node = start("", "10s");
    assert_eq!(node.get("/healthz").await.unwrap(), "ok\n");
    node.until_ready().await;
    let metrics = node.get("/metrics").await.unwrap();
    assert!(
        metrics.contains("holdfast_module_starts_total{module=\"pull\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("holdfast_faults_open"), "{metrics}");
    let modules: serde_json::Value =
        serde_json::from_str(&node.get("/v1/modules").await.unwrap()).unwrap();
    assert_eq!(modules[0]["name"], "pull");
    let workloads: serde_json::Value =
        serde_json::from_str(&node.get("/v1/workloads").await.unwrap()).unwrap();
    assert_eq!(workloads, serde_json::json!([]));
    // No Docker socket: the pull module is degraded with one fault that says what is missing.
    let mut faults = serde_json::Value::Null;
    for _ in 0..200 {
        faults = serde_json::from_str(&node.get("/v1/faults").await.unwrap()).unwrap();
        if faults.as_array().is_some_and(|f| !f.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let faults = faults.as_array().unwrap();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0]["subject"]["module"], "pull");
    assert!(
        faults[0]["message"]
            .as_str()
            .unwrap()
            .contains("start dockerd")
    );
    let modules: serde_json::Value =
        serde_json::from_str(&node.get("/v1/modules").await.unwrap()).unwrap();
    assert_eq!(modules[0]["health"]["state"], "degraded");
    // The rest of the node runs: the admin API is ready.
    assert_eq!(node.get("/readyz").await.unwrap(), "ready\n");
    // The CLI renders the same state.
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["status", "--admin", &node.admin.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("pull") && text.contains("degraded") && text.contains("docker daemon"),
        "{text}"
    );
    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0);
}

// i[verify node.cli.not-running]
#[test]
fn the_cli_says_plainly_when_no_node_is_running() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["faults", "--admin", &addr.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("holdfast: no holdfast node is running at {addr}")),
        "{err}"
    );
}

// r[verify node.stop.signal]
// i[verify node.stop.exit-status]
#[tokio::test]
async fn sigterm_stops_the_node_inside_its_budget_with_exit_0() {
    let node = start("", "5s");
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    let (code, took, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(log.contains("holdfast node stopped"));
}

// i[verify node.stop.exit-status]
#[tokio::test]
async fn a_hanging_stopper_is_cut_off_at_the_budget_and_the_exit_status_says_so() {
    let node = start("[testing]\nhang_on_stop = true\n", "1s");
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    let (code, took, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 3, "{log}");
    // Cut off at its group's share of the 1 s budget; the whole stop stays inside the budget.
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert!(log.contains("cut_off") || log.contains("CutOff"), "{log}");
}

// r[verify node.stop.second-signal]
#[tokio::test]
async fn a_second_sigterm_exits_at_once() {
    let node = start("[testing]\nhang_on_stop = true\n", "60s");
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 4, "{log}");
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "took {:?}",
        began.elapsed()
    );
}

// i[verify node.admin.mutating]
// i[verify node.admin.socket]
// r[verify node.log.no-secrets]
#[tokio::test]
async fn drain_needs_the_token_or_the_socket_and_the_token_is_never_logged() {
    let node = start("", "5s");
    node.until_ready().await;
    let refused = call(&node.admin, hyper::Method::POST, "/v1/drain", None).await;
    assert!(
        matches!(
            refused,
            Err(holdfast::admin::client::ClientError::Refused { status: 401, .. })
        ),
        "{refused:?}"
    );
    let socket = node.dir.path().join("admin.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Read-only over the socket needs nothing.
    let unix = Target::Unix(socket);
    assert!(
        call(&unix, hyper::Method::GET, "/v1/faults", None)
            .await
            .is_ok()
    );
    // The token works over TCP (the CLI reads it from the 0600 file).
    let token = token::read(&node.dir.path().join("token")).unwrap();
    call(&node.admin, hyper::Method::POST, "/v1/drain", Some(&token))
        .await
        .unwrap();
    let (code, log, dir) = node.wait_keeping_dir(Duration::from_secs(10));
    assert_eq!(code, 0);
    assert!(
        !dir.path().join("admin.sock").exists(),
        "the admin socket is removed on a clean stop"
    );
    assert!(log.contains("drain requested"), "{log}");
    assert!(!log.contains(TOKEN), "the token appears in the log");
    assert!(
        !log.contains("PRIVATE KEY"),
        "key material appears in the log"
    );
}

// r[verify node.data-dir]
#[tokio::test]
async fn the_data_directory_is_created_with_mode_0700() {
    let node = start("", "5s");
    node.until_ready().await;
    let mode = std::fs::metadata(node.dir.path().join("data"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
    node.signal(Signal::SIGINT);
    let (code, _, _) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0);
}

// i[verify node.check-config]
#[test]
fn check_config_validates_without_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/single-node.toml"
        ),
        &good,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("check-config")
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[node]\ntick = \"5 minutes\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "{}:2:8: node.tick: invalid duration",
            bad.display()
        )),
        "{err}"
    );
}

// i[verify node.cli.output]
#[tokio::test]
async fn the_cli_prints_tables_by_default_and_json_on_request() {
    let node = start("", "5s");
    node.until_ready().await;
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(args)
            .args(["--admin", &node.admin.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let table = run(&["modules"]);
    assert!(table.starts_with("MODULE"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&run(&["modules", "--json"])).unwrap();
    assert_eq!(json[0]["name"], "pull");
    node.signal(Signal::SIGTERM);
    assert_eq!(node.wait(Duration::from_secs(10)).0, 0);
}

// i[verify node.cli.timeout]
#[test]
fn the_cli_gives_up_on_a_node_that_accepts_but_never_answers() {
    // Accepts (the kernel's backlog does) and never writes: a wedged or stopped node.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let began = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["status", "--admin", &addr.to_string()])
        .output()
        .unwrap();
    let took = began.elapsed();
    drop(listener);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("the node at {addr} did not answer within 5s")),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
}
