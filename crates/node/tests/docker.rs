//! The node against the real dockerd and registry from `cargo xtask test` (skipped loudly
//! without them): a workload's image is pulled and shows in `holdfast status`; the Docker socket
//! gone makes the pull module degraded with one fault while the node runs on; the socket back
//! clears the fault, with no restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use holdfast_test_support::services;
use nix::sys::signal::Signal;

async fn json(node: &common::Node, path: &str) -> serde_json::Value {
    serde_json::from_str(&node.get(path).await.unwrap()).unwrap()
}

async fn until(node: &common::Node, what: &str, mut check: impl FnMut(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = json(node, "/v1/status").await;
        if check(&status) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {status:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn daemon_faults(status: &serde_json::Value) -> usize {
    status["faults"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["subject"]["module"] == "pull" && f["subject"]["name"] == "docker daemon")
        .count()
}

// r[verify node.pull.workloads]
// r[verify node.pull.degraded]
#[tokio::test]
async fn a_workload_image_is_pulled_and_a_docker_outage_is_one_fault_that_clears() {
    let (Some(docker), Some(registry)) = (services::docker(), services::registry()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The node reaches dockerd through a link we can take away and put back.
    let link = dir.path().join("docker.sock");
    let host = format!("unix://{}", link.display());
    let workload = format!(
        "[[workload]]\nname = \"app\"\nimage = \"{}\"\n",
        registry.image
    );
    let node = common::start_in(dir, &workload, "5s", Some(&host));
    node.until_ready().await;

    until(&node, "degraded without the socket", |s| {
        s["modules"][0]["health"]["state"] == "degraded" && daemon_faults(s) == 1
    })
    .await;
    let status = json(&node, "/v1/status").await;
    // The pull module's one fault (the workload module says the same of its own daemon link).
    let pull_faults = status["faults"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["subject"]["module"] == "pull")
        .count();
    assert_eq!(pull_faults, 1, "{status:#}");
    assert_eq!(
        node.get("/readyz").await.unwrap(),
        "ready\n",
        "the rest of the node runs"
    );

    std::os::unix::fs::symlink(&docker.socket, &link).unwrap();
    until(&node, "pulled once the socket is back", |s| {
        s["workloads"][0]["image_state"] == "present" && s["faults"].as_array().unwrap().is_empty()
    })
    .await;
    let status = json(&node, "/v1/status").await;
    assert_eq!(status["modules"][0]["starts"], 1, "no restart: {status:#}");
    assert_eq!(status["modules"][0]["restarts"], 0);
    assert_eq!(status["modules"][0]["health"]["state"], "ready");

    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["status", "--admin", &node.admin.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("app "))
        .unwrap_or_else(|| panic!("no workload row: {text}"));
    assert!(
        row.contains(&registry.image) && row.contains("present"),
        "{text}"
    );

    // The socket goes away while the image is present: degraded, one fault, node still runs.
    std::fs::remove_file(node.dir.path().join("docker.sock")).unwrap();
    until(&node, "degraded after the socket went", |s| {
        s["modules"][0]["health"]["state"] == "degraded" && daemon_faults(s) == 1
    })
    .await;
    std::os::unix::fs::symlink(&docker.socket, node.dir.path().join("docker.sock")).unwrap();
    until(&node, "recovered", |s| {
        s["modules"][0]["health"]["state"] == "ready" && s["faults"].as_array().unwrap().is_empty()
    })
    .await;
    let status = json(&node, "/v1/status").await;
    assert_eq!(status["modules"][0]["starts"], 1, "no restart: {status:#}");

    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0);
}

// r[verify node.workload.module]
// r[verify node.workload.images]
// r[verify node.workload.status]
#[tokio::test]
async fn a_sleep_workload_from_the_registry_runs_and_shows_running() {
    let (Some(docker), Some(registry)) = (services::docker(), services::registry()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The seeded image holds only busybox as /bin/sh, whose shell runs `sleep` as an applet.
    // An owner label of this run's own, so the test touches no other container on the daemon.
    let owner = format!("node-test-{}", std::process::id());
    let extra = format!(
        "[workloads]\nstop_on_exit = true\nowner = \"{owner}\"\n\n\
         [[workload]]\nname = \"sleeper\"\nimage = \"{}\"\ncommand = [\"sh\", \"-c\", \"exec sleep 3600\"]\n\
         min_run = \"1s\"\n",
        registry.image
    );
    let node = common::start_in(dir, &extra, "15s", Some(&docker.host));
    node.until_ready().await;
    until(&node, "running", |s| {
        s["workloads"][0]["run"]["state"] == "running"
            && s["workloads"][0]["image_state"] == "present"
    })
    .await;

    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["workloads", "--admin", &node.admin.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("sleeper "))
        .unwrap_or_else(|| panic!("no workload row: {text}"));
    assert!(row.contains("running for"), "{text}");
    assert!(
        row.contains(&registry.image) && row.contains("present"),
        "{text}"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(20));
    assert_eq!(code, 0);
    // Leave the daemon as we found it: remove this run's containers.
    let listed = Command::new("docker")
        .args(["-H", &docker.host, "ps", "-aq", "--filter"])
        .arg(format!("label=holdfast.owner={owner}"))
        .output();
    if let Ok(listed) = listed {
        for id in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
            let _ = Command::new("docker")
                .args(["-H", &docker.host, "rm", "-f", id])
                .output();
        }
    }
}

// i[verify node.workloads.logs+2]
/// `holdfast logs -f` as the operator types it, against a node running a real container: the
/// command's output goes on across the workload's restart, with the node's one marker line
/// between the two containers' output.
#[tokio::test]
async fn holdfast_logs_follow_goes_on_across_a_restart() {
    let (Some(docker), Some(registry)) = (services::docker(), services::registry()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let owner = format!("logs-cli-{}", std::process::id());
    // Each container prints which it is (its hostname is its short id), runs 2 s and exits 0,
    // past its 1 s min_run, so `always` restarts it at once with a new container.
    let extra = format!(
        "[workloads]\nstop_on_exit = true\nowner = \"{owner}\"\n\n\
         [[workload]]\nname = \"again\"\nimage = \"{}\"\n\
         command = [\"sh\", \"-c\", \"echo run-on-$(hostname); sleep 2\"]\n\
         min_run = \"1s\"\nstop_timeout = \"1s\"\n",
        registry.image
    );
    let node = common::start_in(dir, &extra, "15s", Some(&docker.host));
    node.until_ready().await;
    until(&node, "running", |s| {
        s["workloads"][0]["run"]["state"] == "running"
    })
    .await;

    // Over the Unix socket, which needs no token.
    let socket = node.dir.path().join("admin.sock");
    let mut logs = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["logs", "again", "-f", "--admin"])
        .arg(format!("unix:{}", socket.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = logs.stdout.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let began = Instant::now();
    let deadline = began + Duration::from_secs(60);
    let mut output = Vec::new();
    while output
        .iter()
        .filter(|l: &&String| l.starts_with("run-on-"))
        .count()
        < 2
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match seen.recv_timeout(left) {
            Ok(line) => {
                eprintln!(
                    "[timeline logs-follow] +{:>6} ms  {line}",
                    began.elapsed().as_millis()
                );
                output.push(line);
            }
            Err(_) => {
                let _ = logs.kill();
                let err = logs
                    .wait_with_output()
                    .map(|o| o.stderr)
                    .unwrap_or_default();
                panic!(
                    "two runs not followed within 60 s: {output:?}; stderr: {}",
                    String::from_utf8_lossy(&err)
                );
            }
        }
    }
    // Still following: the command has not exited on its own.
    assert!(matches!(logs.try_wait(), Ok(None)), "{output:?}");
    let _ = logs.kill();
    let _ = logs.wait();

    let runs: Vec<usize> = (0..output.len())
        .filter(|&i| output[i].starts_with("run-on-"))
        .collect();
    assert_ne!(
        output[runs[0]], output[runs[1]],
        "two containers: {output:?}"
    );
    let between = &output[runs[0] + 1..runs[1]];
    assert_eq!(
        between
            .iter()
            .filter(
                |l| l.starts_with("--- holdfast: workload again: following its next container (")
            )
            .count(),
        1,
        "one marker between the runs: {output:?}"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(20));
    assert_eq!(code, 0);
    let listed = Command::new("docker")
        .args(["-H", &docker.host, "ps", "-aq", "--filter"])
        .arg(format!("label=holdfast.owner={owner}"))
        .output();
    if let Ok(listed) = listed {
        for id in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
            let _ = Command::new("docker")
                .args(["-H", &docker.host, "rm", "-f", id])
                .output();
        }
    }
}
