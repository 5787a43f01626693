//! Signals other than the ordered stop's, on the `holdfast` binary as a subprocess: SIGHUP reloads
//! and leaves the node running, SIGQUIT exits at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::start;
use nix::sys::signal::Signal;

/// The line each reload that applied logs.
const RELOADED: &str = "config reloaded";
/// The line a SIGHUP during the stop logs.
const HUP_STOPPING: &str = "SIGHUP: the node is stopping; no reload";

/// The log's JSON events whose message is `message`.
fn events<'a>(log: &'a str, message: &'a str) -> impl Iterator<Item = serde_json::Value> + 'a {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(move |event| event["message"].as_str() == Some(message))
}

// r[verify node.signal.hup+2]
// r[verify node.stop.signal+2]
// i[verify node.stop.exit-status+2]
#[tokio::test]
async fn sighup_reloads_leaves_the_node_ready_and_sigterm_still_stops_it_in_order() {
    let node = start("", "5s");
    node.until_ready().await;
    // Two, one after the other (two sent at once may be delivered as one): each is one reload
    // (its line, the next generation), and the node runs on.
    let log_path = node.dir.path().join("stderr.log");
    for expected in 1..=2 {
        node.signal(Signal::SIGHUP);
        let mut warned = 0;
        for _ in 0..500 {
            let log = std::fs::read_to_string(&log_path).unwrap();
            warned = events(&log, RELOADED).count();
            if warned == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            warned,
            expected,
            "{}",
            std::fs::read_to_string(&log_path).unwrap()
        );
        assert_eq!(node.get("/readyz").await.unwrap(), "ready\n");
        let status: serde_json::Value =
            serde_json::from_str(&node.get("/v1/status").await.unwrap()).unwrap();
        assert_eq!(status["config"]["generation"], expected + 1, "{status}");
    }
    assert_eq!(node.get("/readyz").await.unwrap(), "ready\n");
    assert_eq!(node.get("/healthz").await.unwrap(), "ok\n");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    // The ordered stop ran: every module reported stopped, then the node.
    let reloaded = events(&log, RELOADED).next().unwrap();
    assert_eq!(reloaded["level"], "INFO", "{reloaded}");
    // Nothing changed, so nothing was touched: the one module started once.
    assert_eq!(reloaded["modules"], "{\"pull\": Unchanged}", "{reloaded}");
    let stopped: Vec<_> = events(&log, "module stopped")
        .filter(|event| event["target"] == "holdfast::run")
        .collect();
    assert_eq!(stopped.len(), 1, "{log}");
    assert_eq!(stopped[0]["outcome"], "Stopped", "{log}");
    assert_eq!(events(&log, "holdfast node stopped").count(), 1, "{log}");
    // A reload of a valid file is no fault: it filed nothing.
    assert!(!log.contains("config_invalid"), "{log}");
}

// r[verify node.signal.hup+2]
#[tokio::test]
async fn sighup_while_the_config_is_still_being_read_does_not_kill_the_node() {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;

    let dir = tempfile::tempdir().unwrap();
    let config = common::write_config(dir.path(), "", "5s", None);
    let text = std::fs::read(&config).unwrap();
    // The config is a FIFO: reading it blocks until the test writes it, which holds the node in
    // its config load for as long as the test likes.
    let fifo = dir.path().join("fifo.toml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let child = common::spawn_only(
        &dir,
        &fifo,
        std::process::Command::new(env!("CARGO_BIN_EXE_holdfast")),
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    // A non-blocking open for writing succeeds once the node has the FIFO open for reading.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut writer = loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
        {
            Ok(file) => break file,
            Err(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the node never opened its config"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    nix::sys::signal::kill(pid, Signal::SIGHUP).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    writer.write_all(&text).unwrap();
    drop(writer);

    let node = common::attach(dir, child);
    node.until_ready().await;
    assert_eq!(node.get("/readyz").await.unwrap(), "ready\n");
    // Held until the node ran, then answered as any other SIGHUP: a reload, which reads the
    // FIFO again.
    let again = std::thread::spawn(move || {
        let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        writer.write_all(&text).unwrap();
    });
    let log_path = node.dir.path().join("stderr.log");
    for _ in 0..500 {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if events(&log, RELOADED).count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    again.join().unwrap();
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert_eq!(events(&log, RELOADED).count(), 1, "{log}");
}

// r[verify node.signal.quit]
// i[verify node.stop.exit-status+2]
#[tokio::test]
async fn sigquit_exits_at_once_with_status_4_and_runs_no_stop_plan() {
    let node = start("", "5s");
    node.until_ready().await;
    node.signal(Signal::SIGQUIT);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 4, "{log}");
    let quit = events(&log, "SIGQUIT: exiting at once, without the stop plan")
        .next()
        .unwrap_or_else(|| panic!("no SIGQUIT line: {log}"));
    assert_eq!(quit["level"], "ERROR", "{quit}");
    assert_eq!(events(&log, "module stopped").count(), 0, "{log}");
    assert_eq!(events(&log, "holdfast node stopped").count(), 0, "{log}");
}

// r[verify node.signal.quit]
// r[verify node.signal.hup+2]
#[tokio::test]
async fn sighup_leaves_a_stop_going_and_sigquit_ends_a_stuck_stop_at_once() {
    let Some(mut node) = common::start_testing("[testing]\nhang_on_stop = true\n", "60s") else {
        return;
    };
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    // The stop has begun and hangs in the test module's stopper (its share of 60 s).
    let log_path = node.dir.path().join("stderr.log");
    for _ in 0..500 {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if log.contains("SIGTERM: stopping") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A SIGHUP now is logged and leaves the stop going on.
    node.signal(Signal::SIGHUP);
    let mut warned = false;
    for _ in 0..500 {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if events(&log, HUP_STOPPING).count() == 1 {
            warned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(warned, "{}", std::fs::read_to_string(&log_path).unwrap());
    assert!(node.child.try_wait().unwrap().is_none(), "the stop ended");
    node.signal(Signal::SIGQUIT);
    // Exiting inside the 10 s limit, with the aborted status, is SIGQUIT acting at once.
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 4, "{log}");
    assert_eq!(
        events(&log, "SIGQUIT: exiting at once, without the stop plan").count(),
        1,
        "{log}"
    );
    assert_eq!(events(&log, "holdfast node stopped").count(), 0, "{log}");
}
