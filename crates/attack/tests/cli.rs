//! The attacker's command line, run as a process. Being an integration test, it also makes the
//! workspace's test build build the `holdfast-attack` binary itself, with the test build's
//! features: CI runs that binary (`cargo xtask attack --attacker`) instead of compiling the
//! attacker's dependencies again under the feature set of a `cargo build -p holdfast-attack`.

use std::process::Command;

#[test]
fn an_unknown_flood_is_refused_with_the_floods_named_before_any_node_starts() {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast-attack"))
        .args(["--node-bin", "/nonexistent/holdfast", "--scale", "ci"])
        .args(["--only", "no-such-flood"])
        .output()
        .expect("running holdfast-attack");
    assert_eq!(out.status.code(), Some(2), "could not measure: exit 2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no flood named \"no-such-flood\""),
        "{stderr}"
    );
    for flood in [
        "admin-slowloris",
        "gateway-bad-tokens",
        "forward-unvalidated",
    ] {
        assert!(stderr.contains(flood), "names {flood}: {stderr}");
    }
}
