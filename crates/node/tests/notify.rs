//! systemd's notify protocol on the `holdfast` binary as a subprocess: the test is the service
//! manager, listening on the socket it gives the node as `NOTIFY_SOCKET`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{spawn_with, write_config};
use nix::sys::signal::Signal;

/// Every line received so far, each datagram split into its `KEY=VALUE` lines.
struct Manager {
    rx: mpsc::Receiver<String>,
    lines: Vec<String>,
}

impl Manager {
    fn listen(socket: UnixDatagram) -> Manager {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                for line in String::from_utf8_lossy(&buf[..n]).lines() {
                    if tx.send(line.to_owned()).is_err() {
                        return;
                    }
                }
            }
        });
        Manager {
            rx,
            lines: Vec::new(),
        }
    }

    /// Waits (at most 20 s) until a line satisfying `want` has arrived; its index.
    fn until(&mut self, want: impl Fn(&str) -> bool) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(at) = self.lines.iter().position(|l| want(l)) {
                return at;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.lines.push(line),
                Err(_) => panic!("never received it; got {:#?}", self.lines),
            }
        }
    }

    fn drain(&mut self) {
        while let Ok(line) = self.rx.recv_timeout(Duration::from_millis(200)) {
            self.lines.push(line);
        }
    }
}

/// A node started with `extra` config and `stop_budget`, with a service manager's socket as
/// `NOTIFY_SOCKET` and, when given, `WATCHDOG_USEC`; the manager listening on that socket.
fn managed(extra: &str, stop_budget: &str, watchdog_usec: Option<&str>) -> (Manager, common::Node) {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let manager = Manager::listen(socket);
    let config = write_config(dir.path(), extra, stop_budget, None);
    let mut command = Command::new(env!("CARGO_BIN_EXE_holdfast"));
    command.env("NOTIFY_SOCKET", &socket_path);
    match watchdog_usec {
        Some(usec) => command
            .env("WATCHDOG_USEC", usec)
            .env_remove("WATCHDOG_PID"),
        None => command.env_remove("WATCHDOG_USEC"),
    };
    (manager, spawn_with(dir, &config, command))
}

// r[verify node.systemd.notify]
// r[verify node.systemd.status]
// r[verify node.systemd.watchdog]
#[tokio::test]
async fn a_service_manager_hears_ready_status_watchdog_and_stopping_in_order() {
    // 2 s: a ping every second, each supervisor loop turning every half second.
    let (mut manager, node) = managed("", "5s", Some("2000000"));
    node.until_ready().await;

    let ready = manager.until(|l| l == "READY=1");
    // No Docker daemon: the pull module is degraded with its fault, and the status says so.
    let degraded = manager.until(|l| l == "STATUS=ready: 1 module, 1 fault (pull degraded)");
    // Pings, more than one (the supervisor's loop keeps turning).
    let first_ping = manager.until(|l| l == "WATCHDOG=1");
    let pings_before = manager.lines.iter().filter(|l| *l == "WATCHDOG=1").count();
    let deadline = Instant::now() + Duration::from_secs(10);
    while manager.lines.iter().filter(|l| *l == "WATCHDOG=1").count() < pings_before + 2 {
        assert!(
            Instant::now() < deadline,
            "pings stopped: {:#?}",
            manager.lines
        );
        if let Ok(line) = manager.rx.recv_timeout(Duration::from_millis(100)) {
            manager.lines.push(line);
        }
    }
    assert!(
        !manager.lines.iter().any(|l| l == "STOPPING=1"),
        "{:#?}",
        manager.lines
    );
    let before_stop = manager.lines.len();

    node.signal(Signal::SIGTERM);
    let stopping = manager.until(|l| l == "STOPPING=1");
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    manager.drain();

    // What the service manager heard, in order (shown with --nocapture).
    for line in &manager.lines {
        println!("notify: {line}");
    }
    let lines = &manager.lines;
    // The first line counts the node's one module (pull), whether it is still starting then or
    // already ready.
    assert!(
        [
            "STATUS=starting: 0 of 1 modules started",
            "STATUS=starting: 1 of 1 modules started"
        ]
        .contains(&lines[0].as_str())
            || lines[0].starts_with("STATUS=ready: 1 module,"),
        "{lines:#?}"
    );
    assert_eq!(lines.iter().filter(|l| *l == "READY=1").count(), 1);
    assert_eq!(lines.iter().filter(|l| *l == "STOPPING=1").count(), 1);
    // The ready status comes with READY=1, after the starting one.
    assert!(
        lines[ready - 1].starts_with("STATUS=ready: 1 module"),
        "{lines:#?}"
    );
    assert!(
        ready < degraded || lines[ready - 1] == lines[degraded],
        "{lines:#?}"
    );
    assert!(ready < stopping && degraded < stopping && first_ping < stopping);
    assert!(stopping >= before_stop, "{lines:#?}");
    assert!(
        lines[stopping - 1].starts_with("STATUS=stopping: "),
        "{lines:#?}"
    );
}

// r[verify node.systemd.notify]
#[tokio::test]
async fn without_notify_socket_nothing_is_sent_and_the_node_runs() {
    // The common start removes nothing but RUST_LOG: make sure no NOTIFY_SOCKET leaks in.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "", "5s", None);
    let mut command = Command::new(env!("CARGO_BIN_EXE_holdfast"));
    command
        .env_remove("NOTIFY_SOCKET")
        .env("WATCHDOG_USEC", "2000000");
    let node = spawn_with(dir, &config, command);
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains("service manager"), "{log}");
}

// r[verify node.systemd.notify]
// r[verify node.systemd.status]
#[tokio::test]
async fn the_last_status_is_sent_before_the_node_exits() {
    let (mut manager, node) = managed("", "5s", None);
    node.until_ready().await;
    manager.until(|l| l == "READY=1");
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    // Everything the node sent is in the socket's queue by the time it has exited.
    manager.drain();
    let statuses: Vec<&String> = manager
        .lines
        .iter()
        .filter(|l| l.starts_with("STATUS="))
        .collect();
    assert_eq!(
        statuses.last().map(|l| l.as_str()),
        Some("STATUS=stopping: every module stopped"),
        "{:#?}",
        manager.lines
    );
    assert_eq!(
        manager.lines.iter().filter(|l| *l == "STOPPING=1").count(),
        1
    );
}

/// `WATCHDOG=1` pings among `lines`.
fn pings(lines: &[String]) -> usize {
    lines.iter().filter(|l| *l == "WATCHDOG=1").count()
}

// r[verify node.systemd.watchdog]
#[tokio::test]
async fn a_module_start_that_blocks_its_supervisor_stops_the_watchdog_pings() {
    if !cfg!(feature = "testing-modules") {
        holdfast_test_support::services::skip_loudly(
            "the testing-modules feature",
            "built without --features testing-modules (cargo xtask test turns it on)",
            holdfast_test_support::services::FailWhen::Never,
        );
        return;
    }
    // 1 s: a ping every half second while every supervisor loop turns.
    let (mut manager, node) = managed("[testing]\nwedge_start = true\n", "1s", Some("1000000"));
    // The node runs on (its admin API answers: one worker is left), but no ping comes once the
    // wedged supervisor's last turn is more than half an interval old: none in 2.5 s, after the
    // first second.
    std::thread::sleep(Duration::from_secs(1));
    manager.drain();
    let before = pings(&manager.lines);
    std::thread::sleep(Duration::from_millis(2500));
    manager.drain();
    let after = pings(&manager.lines);
    assert!(
        node.get("/healthz").await.is_ok(),
        "the node stopped answering"
    );
    node.signal(Signal::SIGKILL);
    let _ = node.wait(Duration::from_secs(10));
    assert!(before <= 2, "{:#?}", manager.lines);
    assert_eq!(after, before, "pings after the wedge: {:#?}", manager.lines);
    // Nor READY=1: the wedged module never finished its first start.
    assert!(
        !manager.lines.iter().any(|l| l == "READY=1"),
        "{:#?}",
        manager.lines
    );
}

// r[verify node.systemd.reload]
// r[verify node.signal.hup+2]
#[tokio::test]
async fn a_reload_is_reloading_then_ready_with_the_generation_in_its_status() {
    let (mut manager, node) = managed("", "5s", None);
    node.until_ready().await;
    manager.until(|l| l == "READY=1");
    node.signal(Signal::SIGHUP);
    let reloading = manager.until(|l| l == "RELOADING=1");
    let status = manager.until(|l| l == "STATUS=reloaded: config generation 2");
    let lines = manager.lines.clone();
    // MONOTONIC_USEC= with RELOADING=1 (systemd's notify-reload asks for it), then READY=1.
    assert!(
        lines[reloading + 1].starts_with("MONOTONIC_USEC="),
        "{lines:#?}"
    );
    let usec: u64 = lines[reloading + 1]["MONOTONIC_USEC=".len()..]
        .parse()
        .unwrap();
    assert!(usec > 0, "{lines:#?}");
    let ready_again = lines
        .iter()
        .enumerate()
        .skip(reloading)
        .find(|(_, l)| *l == "READY=1")
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no READY=1 after RELOADING=1: {lines:#?}"));
    assert!(
        reloading < ready_again && ready_again < status,
        "{lines:#?}"
    );

    // An invalid file: still READY=1 after it, the generation kept.
    let config = node.dir.path().join("holdfast.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replacen("[pull]\n", "[pull]\nenabeld = 1\n", 1),
    )
    .unwrap();
    node.signal(Signal::SIGHUP);
    manager.until(|l| l == "STATUS=reload refused: config generation 2 kept");
    assert_eq!(
        manager.lines.iter().filter(|l| *l == "RELOADING=1").count(),
        2
    );
    assert_eq!(manager.lines.iter().filter(|l| *l == "READY=1").count(), 3);
    assert_eq!(node.get("/readyz").await.unwrap(), "ready\n");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
}
