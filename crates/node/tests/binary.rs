//! The `holdfast` binary as a subprocess: admin endpoints, signals, stop budget, exit status, and
//! logs that never carry the token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TOKEN, start, start_testing};
use holdfast::admin::client::{Target, call};
use holdfast::admin::token;
use nix::sys::signal::Signal;

// i[verify node.admin.endpoints]
// i[verify node.admin.readyz+2]
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

// r[verify node.stop.signal+2]
// i[verify node.stop.exit-status+2]
#[tokio::test]
async fn sigterm_stops_the_node_inside_its_budget_with_exit_0() {
    let node = start("", "5s");
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    let (code, took, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // It said it was running (every first start done) before it stopped.
    let running = log.find("holdfast node running");
    assert!(running.is_some(), "{log}");
    assert!(running < log.find("holdfast node stopped"), "{log}");
}

// i[verify node.stop.exit-status+2]
#[tokio::test]
async fn a_hanging_stopper_is_cut_off_at_the_budget_and_the_exit_status_says_so() {
    let Some(node) = start_testing("[testing]\nhang_on_stop = true\n", "1s") else {
        return;
    };
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    // Its stopper never returns, so exiting at all is the cut-off; the 10 s limit only keeps a
    // broken build from hanging the suite, and no wall-time bound is asserted (a loaded machine
    // stretches it): the plan's own record says what it cut off and under which budget.
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 3, "{log}");
    let cut: serde_json::Value = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["message"] == "module stop overran its budget: cut off")
        .unwrap_or_else(|| panic!("no cut-off event: {log}"));
    assert_eq!(
        cut["module"],
        // The testing module's name (holdfast::modules::testing::HANG_NAME, which exists only
        // with the feature this test needs; without it the test skips before reaching here).
        "testing-hang",
        "{cut}"
    );
    // Its group's share of the node's 1 s stop budget, never more.
    let budget_ms = cut["budget_ms"].as_u64().unwrap_or_default();
    assert!((1..=1000).contains(&budget_ms), "{cut}");
}

// r[verify node.stop.second-signal+2]
// i[verify node.admin.readyz+2]
#[tokio::test]
async fn a_second_sigterm_exits_at_once() {
    let Some(node) = start_testing("[testing]\nhang_on_stop = true\n", "60s") else {
        return;
    };
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    // The stop has begun: not ready any more.
    let mut readyz = None;
    for _ in 0..100 {
        readyz = Some(node.get("/readyz").await);
        if matches!(&readyz, Some(Err(holdfast::admin::client::ClientError::Refused { status: 503, body, .. })) if body.contains("draining"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        matches!(&readyz, Some(Err(holdfast::admin::client::ClientError::Refused { status: 503, body, .. })) if body.contains("draining")),
        "{readyz:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    node.signal(Signal::SIGTERM);
    // The hanging stopper would hold the stop for its share of the 60 s budget: exiting inside
    // the 10 s limit, with the aborted status, is the second signal acting at once.
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 4, "{log}");
}

// i[verify node.admin.mutating]
// i[verify node.admin.socket+2]
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

/// Opens a TCP connection to the node's admin API and sends half a request, then holds it.
fn stalled_client(node: &common::Node) -> std::net::TcpStream {
    use std::io::Write;
    let Target::Tcp(addr) = &node.admin else {
        panic!("the node listens on TCP")
    };
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    // Its own address as Host: the admin API answers nothing else over TCP.
    stream
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .unwrap();
    stream
}

// r[verify node.stop.signal+2]
#[tokio::test]
async fn a_stalled_admin_client_does_not_hold_the_node_past_its_budget() {
    let node = start("", "2s");
    node.until_ready().await;
    let _stalled = stalled_client(&node);
    tokio::time::sleep(Duration::from_millis(100)).await;
    node.signal(Signal::SIGTERM);
    let (code, took, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert!(took < Duration::from_millis(2500), "took {took:?}");
}

// r[verify node.stop.signal+2]
#[tokio::test]
async fn an_admin_request_open_when_the_stop_plan_returns_is_answered_in_the_budget_left() {
    use std::io::{Read, Write};
    let mut node = start("", "10s");
    node.until_ready().await;
    let mut client = stalled_client(&node);
    tokio::time::sleep(Duration::from_millis(100)).await;
    node.signal(Signal::SIGTERM);
    // The stop plan has returned (its modules stop at once): what is left of the 10 s budget is
    // the admin API's, to finish the request it has half read.
    let stderr = node.dir.path().join("stderr.log");
    let began = Instant::now();
    while !std::fs::read_to_string(&stderr)
        .unwrap()
        .contains("holdfast node stopped")
    {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the stop plan never returned"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The admin API's shutdown has begun (it no longer accepts), and the process waits for the
    // request still open instead of exiting: no fixed sleep decides this.
    let Target::Tcp(addr) = node.admin.clone() else {
        panic!("the node listens on TCP")
    };
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the admin API never stopped accepting"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "the node exited with an admin request still open and budget left"
    );
    client.write_all(b"\r\n").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut response = String::new();
    let _ = client.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response:?}");
    // Its last request answered, the admin API is done: the node exits then, not at the budget.
    let (code, took, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

// r[verify node.stop.second-signal+2]
#[tokio::test]
async fn a_second_sigterm_while_admin_requests_are_still_open_exits_at_once() {
    let node = start("", "60s");
    node.until_ready().await;
    let _stalled = stalled_client(&node);
    tokio::time::sleep(Duration::from_millis(100)).await;
    node.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(500)).await;
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

// r[verify node.stop.second-signal+2]
#[tokio::test]
async fn after_a_drain_call_the_first_sigterm_does_not_abort_the_drain() {
    let Some(node) = start_testing("[testing]\nhang_on_stop = true\n", "6s") else {
        return;
    };
    node.until_ready().await;
    let unix = Target::Unix(node.dir.path().join("admin.sock"));
    call(&unix, hyper::Method::POST, "/v1/drain", None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    node.signal(Signal::SIGTERM);
    // The drain goes on until the plan cuts the hanging stopper off (3), not aborted (4).
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 3, "{log}");
    assert!(log.contains("already stopping"), "{log}");
}

fn run_refused(dir: &std::path::Path, socket: &std::path::Path) -> (i32, String) {
    let config = common::write_config(dir, "", "2s", None);
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        &format!("socket = \"{}\"", dir.join("admin.sock").display()),
        &format!("socket = \"{}\"", socket.display()),
    );
    let text = text.replace("listen = \"127.0.0.1:0\"", "listen = \"off\"");
    std::fs::write(&config, text).unwrap();
    let log = dir.join("refused.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["run", "-c"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let began = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if began.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node started instead of refusing the socket path");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(&log).unwrap(),
    )
}

// i[verify node.admin.socket+2]
#[test]
fn a_path_that_is_not_a_socket_is_never_deleted_and_the_node_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("important.txt");
    std::fs::write(&path, "keep me").unwrap();
    let (code, err) = run_refused(dir.path(), &path);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
}

// i[verify node.admin.socket+2]
#[tokio::test]
async fn a_live_nodes_socket_is_never_taken_over_and_a_stale_one_is_replaced() {
    let node = start("", "5s");
    node.until_ready().await;
    let socket = node.dir.path().join("admin.sock");
    let other = tempfile::tempdir().unwrap();
    let (code, err) = run_refused(other.path(), &socket);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already serving"), "{err}");
    // The first node still answers on its socket.
    let unix = Target::Unix(socket.clone());
    assert!(
        call(&unix, hyper::Method::GET, "/healthz", None)
            .await
            .is_ok()
    );
    node.signal(Signal::SIGTERM);
    assert_eq!(node.wait(Duration::from_secs(10)).0, 0);

    // A socket nobody listens on (a crashed run's) is replaced.
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("admin.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let node = common::start_in(dir, "", "5s", None);
    node.until_ready().await;
    let unix = Target::Unix(stale);
    assert_eq!(
        call(&unix, hyper::Method::GET, "/healthz", None)
            .await
            .unwrap(),
        "ok\n"
    );
    node.signal(Signal::SIGTERM);
    assert_eq!(node.wait(Duration::from_secs(10)).0, 0);
}

// i[verify node.admin.socket+2]
#[tokio::test]
async fn under_a_permissive_umask_the_socket_is_0600_and_new_parents_0700() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::write_config(dir.path(), "", "5s", None);
    let socket = dir.path().join("run/holdfast/admin.sock");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!("socket = \"{}\"", dir.path().join("admin.sock").display()),
        &format!("socket = \"{}\"", socket.display()),
    );
    std::fs::write(&config, text).unwrap();
    let mut shell = Command::new("sh");
    shell
        .arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_holdfast"));
    let node = common::spawn_with(dir, &config, shell);
    node.until_ready().await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    assert_eq!(mode(socket.parent().unwrap().parent().unwrap()), 0o700);
    node.signal(Signal::SIGTERM);
    let (code, _, dir) = node.wait_keeping_dir(Duration::from_secs(10));
    assert_eq!(code, 0);
    assert!(!dir.path().join("run/holdfast/admin.sock").exists());
}

/// The test suites' own hygiene: a node they start dies with the thread that started it, so a
/// test process killed from outside (a mutation run's timeout) leaves no node behind.
#[test]
fn a_node_a_test_starts_dies_with_the_thread_that_started_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::write_config(dir.path(), "", "5s", None);
    let pid = std::thread::scope(|s| {
        s.spawn(|| {
            // Not waited for and not killed: only the thread's end may stop it (reaped by pid
            // below).
            #[allow(clippy::zombie_processes)]
            let child =
                common::spawn_only(&dir, &config, Command::new(env!("CARGO_BIN_EXE_holdfast")));
            child.id()
        })
        .join()
        .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A dead child not yet reaped is a zombie ('Z'); the process is ours to reap below.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        if matches!(state, Some("Z") | None) {
            break;
        }
        if Instant::now() >= deadline {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
            panic!("the node {pid} still ran after the thread that started it ended ({state:?})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        None,
    );
}
