//! The demo's command line, run as the built binary. Being an integration test, it also makes the
//! workspace's test build build the binary with the suite's features, so CI runs that binary
//! instead of building the demo again under another feature unification (`.ci/run`).

use std::process::Command;

fn demo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_holdfast-drain-demo"))
        .args(args)
        .output()
        .expect("the demo binary runs")
}

// i[verify xtask.drain-demo.command+2]
#[test]
fn fewer_than_two_clients_are_refused_before_anything_starts() {
    let out = demo(&["--clients", "1", "--holdfast", "/nonexistent/holdfast"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--clients") && stderr.contains("2..=62500"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "no report for a refused command line"
    );
}

// i[verify xtask.drain-demo.command+2]
#[test]
fn an_unknown_arm_is_refused_naming_the_three() {
    let out = demo(&["--arm", "chaos"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for arm in ["control", "graceful", "recovery"] {
        assert!(stderr.contains(arm), "{arm} not offered: {stderr}");
    }
}
