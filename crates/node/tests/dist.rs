//! `dist/`: the systemd unit is one systemd accepts, and its command line is one the CLI parses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use clap::Parser;
use holdfast::cli::{Cli, Command as Sub};

fn unit_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../dist/holdfast.service")
}

/// Every `KEY=VALUE` of the unit, in order (comments and section headers left out).
fn unit() -> Vec<(String, String)> {
    // The text the crate ships, which is the file's.
    assert_eq!(
        holdfast::notify::UNIT,
        std::fs::read_to_string(unit_path()).unwrap()
    );
    holdfast::notify::UNIT
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn value(unit: &[(String, String)], key: &str) -> String {
    let values: Vec<&String> = unit
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values.len(), 1, "{key}: {values:?}");
    values[0].clone()
}

// i[verify node.systemd.unit]
#[test]
fn the_units_command_line_parses_and_its_settings_are_the_documented_ones() {
    let unit = unit();
    let exec = value(&unit, "ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert!(argv[0].ends_with("/holdfast"), "{exec}");
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{exec}: {e}"));
    match cli.command {
        Sub::Run { config, .. } => {
            assert_eq!(config, Some(PathBuf::from("/etc/holdfast/holdfast.toml")));
        }
        other => panic!("ExecStart runs {other:?}"),
    }
    assert_eq!(value(&unit, "Type"), "notify");
    assert_eq!(value(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert!(value(&unit, "WatchdogSec").ends_with('s'));
    assert_eq!(value(&unit, "Restart"), "on-failure");
    assert_eq!(value(&unit, "User"), "holdfast");
    assert_eq!(value(&unit, "SupplementaryGroups"), "docker");
    assert_eq!(value(&unit, "NoNewPrivileges"), "true");
    assert_eq!(value(&unit, "ProtectSystem"), "strict");
    assert_eq!(value(&unit, "ReadWritePaths"), "/var/lib/holdfast");
    assert_eq!(value(&unit, "AmbientCapabilities"), "CAP_NET_BIND_SERVICE");
    assert_eq!(
        value(&unit, "CapabilityBoundingSet"),
        "CAP_NET_BIND_SERVICE"
    );
    // The node's data directory by default is the one the unit lets it write.
    let config = holdfast::config::Config::parse(
        "single-node.toml",
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/single-node.toml"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(config.node.data_dir, PathBuf::from("/var/lib/holdfast"));
}

// i[verify node.systemd.unit]
#[test]
fn systemd_analyze_verify_reports_nothing_about_the_unit() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        holdfast_test_support::services::skip_loudly(
            "systemd-analyze",
            "not installed (apt package systemd): the unit's syntax is not checked by systemd",
            holdfast_test_support::services::FailWhen::Never,
        );
        return;
    };
    assert!(version.status.success());
    // verify checks that ExecStart's binary exists: point it at the one just built.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(unit_path())
        .unwrap()
        .replace("/usr/bin/holdfast", env!("CARGO_BIN_EXE_holdfast"));
    let unit = dir.path().join("holdfast.service");
    std::fs::write(&unit, text).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A key it does not know or a value it cannot parse is only a warning line (exit 0): any
    // line about the unit fails the test.
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("holdfast.service"), "{stderr}");
}
