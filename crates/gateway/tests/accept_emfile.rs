//! The accept loop out of file descriptors: this test lowers its own process's descriptor limit
//! (so it is alone in its test binary), runs the gateway into EMFILE, and checks on tokio's paused
//! clock that the failed accepts are paced on the back-off, then that accepting resumes once a
//! descriptor is free.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use tokio::net::TcpStream;
use tokio::time::Instant;

fn open_fds() -> usize {
    // The listing's own descriptor is among the entries.
    std::fs::read_dir("/proc/self/fd").unwrap().count() - 1
}

/// Sets this process's soft descriptor limit (prlimit(1): no unsafe code for setrlimit).
fn set_soft_nofile(soft: usize) -> bool {
    let hard = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .unwrap();
    std::process::Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={soft}:{hard}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Lets the gateway accept (or fail to), returning as soon as an accept failed.
async fn settle(gateway: &holdfast_gateway::Gateway) {
    for _ in 0..20 {
        if gateway.stats().accept_errors > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits (on the paused clock) until the gateway has torn down the connection whose client left.
async fn settle_closed(gateway: &holdfast_gateway::Gateway, accepted: u64) {
    let open = usize::try_from(accepted).unwrap() - 1;
    for _ in 0..100 {
        if gateway.connections() <= open {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the departed client's connection was not torn down");
}

// r[verify gateway.edge.accept]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn out_of_descriptors_the_accept_loop_backs_off_and_resumes() {
    let mut c = config("a");
    c.per_ip_limit = 0;
    c.unauthenticated_per_ip_limit = 0;
    // The paused clock jumps whenever the runtime idles: no other timer may end a connection
    // (and free its descriptor) during the test.
    c.handshake_timeout = Duration::from_secs(24 * 3600);
    c.auth_timeout = Duration::from_secs(24 * 3600);
    c.ping_interval = Duration::from_secs(24 * 3600);
    c.idle_timeout = Duration::from_secs(48 * 3600);
    let node = start(c).await;
    let addr = node.gateway.local_addr();
    let before = open_fds();
    if which_prlimit().is_none() || !set_soft_nofile(before + 3) {
        eprintln!("SKIPPED: prlimit(1) is not available to lower the descriptor limit");
        return;
    }
    // Clients until no descriptor is left: Linux's accept takes a descriptor before it looks at
    // the backlog, so from then on every accept fails with EMFILE.
    let mut clients = Vec::new();
    for _ in 0..4 {
        match TcpStream::connect(addr).await {
            Ok(c) => clients.push(c),
            Err(_) => break,
        }
        settle(&node.gateway).await;
        if node.gateway.stats().accept_errors > 0 {
            break;
        }
    }
    let started = Instant::now();
    while node.gateway.stats().accept_errors < 8 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "accept never failed: {:?}",
            node.gateway.stats()
        );
    }
    let elapsed = started.elapsed();
    // Seven pauses between the first and the eighth failure: 5 + 10 + ... + 320 = 635 ms at
    // least, less the millisecond `started` may lag the first (a fixed 50 ms pause would take
    // 350 ms; a spin, none).
    assert!(elapsed >= Duration::from_millis(634), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    let accepted = node.gateway.stats().accepted;

    // Descriptors come free (a client leaves, and the gateway closes its side) and a new client
    // arrives: within one capped pause it is accepted.
    clients.remove(0);
    settle_closed(&node.gateway, accepted).await;
    let freed = Instant::now();
    let _late = TcpStream::connect(addr).await.unwrap();
    while node.gateway.stats().accepted == accepted {
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            freed.elapsed() < Duration::from_millis(1300),
            "not resumed: {:?}",
            node.gateway.stats(),
        );
    }

    // The late client is still in the backlog and the descriptors are gone again: the loop is
    // back in a streak. Deep into it (the seventh pause is 320 ms or more), a stop ends the pause
    // at once rather than when it runs out: the listener closes without the clock moving on.
    let errors = node.gateway.stats().accept_errors;
    let streak = Instant::now();
    while node.gateway.stats().accept_errors < errors + 7 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(streak.elapsed() < Duration::from_secs(30), "no new streak");
    }
    let stop = Instant::now();
    node.gateway.abandon();
    loop {
        match TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            // Still listening (or this process is still out of descriptors): look again.
            _ => tokio::time::sleep(Duration::from_millis(1)).await,
        }
        assert!(
            stop.elapsed() < Duration::from_millis(100),
            "the stop waited for the pause to end"
        );
    }
    drop(clients);
    set_soft_nofile(before + 1000);
}

fn which_prlimit() -> Option<()> {
    std::process::Command::new("prlimit")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())
        .map(|_| ())
}
